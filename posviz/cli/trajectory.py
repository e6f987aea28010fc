"""``posviz trajectory``: any measure of the registry along a checkpoint series (Toeplitzness of E_P with its null
band by default; RoPE band usage; attention and hidden states on text; measures of other packages), and the views
the registry's measures name for it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from posviz.cli.options import (
    HELP_NULL_DRAWS,
    HELP_POSITIONS,
    HELP_TABLE,
    Normalize,
    OutputFormat,
    one_figure,
    rows_renderer,
    split_outputs,
    write_outputs,
)

#: Table columns, the headline variant (off-diagonal R²) first.
COLUMNS = (("step", "step"), ("toeplitzness_offdiag", "R² offdiag"), ("null_mean_offdiag", "null offdiag"),
           ("excess_offdiag", "excess offdiag"), ("toeplitzness", "R² full"), ("null_mean", "null full"), ("excess", "excess full"))


def _parse_steps(text: str | None) -> list[int] | None:
    from posviz.errors import OptionError

    if text is None:
        return None
    try:
        steps = [int(s.strip().lower().removesuffix("k")) * (1000 if s.strip().lower().endswith("k") else 1)
                 for s in text.split(",")]
    except ValueError:
        raise OptionError(f"--steps {text}: give whole numbers separated by commas (20k means 20000)") from None
    if any(s < 0 for s in steps):
        raise OptionError(f"--steps {text}: steps cannot be negative")
    return steps


def _parse_revisions(text: str | None) -> list[str] | None:
    return None if text is None else [r.strip() for r in text.split(",")]


def _grouped_table(rows: list[dict], columns: Sequence[tuple[str, int, Callable[[dict], Any]]], footnote: str) -> str:
    """Plain text grouped by series: its name, the column heads, one line per row; the footnote last.

    ``columns`` are ``(head, width, cell)``: ``cell(row)`` is right-aligned to ``width``.
    """
    from posviz.series.integrity import flagged

    marked = any(flagged(r) for r in rows)
    out = []
    for series in dict.fromkeys(r["series"] for r in rows):
        out.append(series)
        out.append("  " + "  ".join(f"{head:>{width}}" for head, width, _ in columns) + ("  check" if marked else ""))
        for r in (r for r in rows if r["series"] == series):
            out.append(("  " + "  ".join(f"{cell(r):>{width}}" for _, width, cell in columns) + _check_cell(r)).rstrip())
    out.append(footnote)
    if marked:
        out.append("check: '= X': same content as checkpoint X (a duplicate: every member of a group is marked, the bytes "
                   "cannot tell which label is genuine); 'suspect': far from both neighbours. The reason is in --format json/csv.")
    return "\n".join(out) + "\n"


def _check_cell(row: dict) -> str:
    """The ``check`` column of a row: ``= X`` for a duplicate of X, ``suspect``, or nothing."""
    if row.get("duplicate_of") is not None:
        return f"  = {row['duplicate_of']}"
    return "  suspect" if row.get("suspect") else ""


def _score_columns(columns: tuple[tuple[str, str], ...], width: int) -> list[tuple[str, int, Callable[[dict], Any]]]:
    """``(key, head)`` columns as :func:`_grouped_table` columns: the step as is, scores by ``posviz.util.format.score``."""
    from posviz.util.format import score

    def cell(key: str) -> Callable[[dict], Any]:
        return (lambda r: str(r["step"])) if key == "step" else (lambda r: score(r.get(key)))

    return [(head, width, cell(key)) for key, head in columns]


def trajectory_table(rows: list[dict]) -> str:
    """A plain text table: one line per checkpoint, grouped by series."""
    return _grouped_table(rows, _score_columns(COLUMNS, 14),
                          "R²: Toeplitzness of P = E_P E_Pᵀ, off-diagonal (main diagonal left out; the headline) and full; "
                          "null: exact mean over row permutations of E_P; excess = (R² − null)/(1 − null).")


#: ``--measure bands`` columns: (head, width, cell).
BAND_COLUMNS: tuple[tuple[str, int, Callable[[dict], Any]], ...] = (
    ("step", 10, lambda r: r["step"]), ("layer", 5, lambda r: r["layer"]), ("heads", 5, lambda r: r["heads"]),
    ("high-freq share", 17, lambda r: f"{r['high_share_mean']:.3f} ± {r['high_share_sd']:.3f}"),
    ("w(k = −1)", 10, lambda r: f"{r['weight_prev_mean']:.3g}"), ("locality", 8, lambda r: f"{r['locality_median']:g}"),
)


def band_table(summary: list[dict]) -> str:
    """``--measure bands``: one line per checkpoint and layer, grouped by series."""
    return _grouped_table(summary, BAND_COLUMNS,
                          "high-freq share: share of each head's band energy E[h, b] = ||W_Q,h,b|| · ||W_K,g(h),b|| in the "
                          "high-frequency half of the RoPE bands (mean ± sd over heads); w(k = −1): mean softmax weight of the previous "
                          "token in the probe profile; locality: median width of the profile's peak (docs/definitions.md).")


ATTENTION_COLUMNS = (("step", "step"), ("toeplitzness_offdiag", "R² offdiag"), ("null_mean_offdiag", "null offdiag"),
                     ("positional_share", "pos. share"), ("positional_share_null", "null share"), ("sink_mass", "sink"))
#: The tiled path's columns (absent from rows of the eager path, which transformers 4.x takes).
LONG_CONTEXT_COLUMNS = (("entropy_normalised", "entropy/log"), ("span90", "span90"), ("sink_rate", "sink rate"))


def attention_table(rows: list[dict]) -> str:
    """``--measure attention``: one line per checkpoint (means over heads), grouped by series."""
    r0 = rows[0]
    tiled = "span90" in r0
    columns = ATTENTION_COLUMNS + (LONG_CONTEXT_COLUMNS if tiled else ())
    extra = (f"; entropy/log: entropy over the log of the keys a query sees; span90: distance holding 90 % of a query's attention "
             f"(tokens); sink rate: share of the heads whose sink mass exceeds {r0['sink_rate_eps']} (Gu et al.)") if tiled else ""
    return _grouped_table(rows, _score_columns(columns, 12),
                          f"Means over {r0['heads']} heads (layers {r0['layers']}) of posviz attention on the same {r0['blocks']} blocks "
                          f"of {r0['positions']} tokens from {r0['corpus']}: Toeplitzness of each head's mean attention (off-diagonal R²), "
                          f"positional share, sink mass; nulls: rows shuffled within their support (exact means){extra}.")


def _score_of(key: str) -> Callable[[dict], str]:
    from posviz.util.format import score

    return lambda r: score(r.get(key))


#: ``--measure hidden`` columns: (head, width, cell).
HIDDEN_COLUMNS: tuple[tuple[str, int, Callable[[dict], Any]], ...] = (
    ("step", 10, lambda r: r["step"]), ("layer", 5, lambda r: r["layer"]),
    ("pos. share", 12, _score_of("positional_share")), ("null share", 12, _score_of("positional_share_null")),
    ("R² offdiag", 12, _score_of("toeplitzness_offdiag")), ("null offdiag", 12, _score_of("toeplitzness_null_offdiag")),
    ("rank90", 6, lambda r: r["rank90"]), ("probe MAE", 10, lambda r: f"{r['probe_mae']:.2f}"),
    ("MAE middle", 10, lambda r: f"{r['probe_mae_baseline']:.2f}"),
)


def hidden_table(rows: list[dict]) -> str:
    """``--measure hidden``: one line per checkpoint and layer, grouped by run."""
    r0 = rows[0]
    grouped = [{**r, "series": r["run"]} for r in rows]
    return _grouped_table(grouped, HIDDEN_COLUMNS,
                          f"posviz hidden on the same {r0['blocks']} blocks of {r0['seq_len']} tokens from {r0['corpus']} "
                          "(positions holding a special token in every block left out): positional share of the hidden states "
                          "(null: positions shuffled within blocks, exact mean), Toeplitzness of P_l = V_l V_lᵀ (null: rows of V_l "
                          "permuted), rank90, position probe's mean absolute error on held-out blocks against always predicting the middle.")


# --- the views that posviz's measures name (posviz.measures.builtin), and those of a measure without its own ---------


def toeplitzness_view(result: Any) -> str:
    return trajectory_table(result.rows)


def toeplitzness_figure(result: Any, *, band: bool, keep_duplicates: bool) -> Any:
    from posviz.plots.trajectory import plot_trajectory

    return plot_trajectory(result.rows, band=band, keep_duplicates=keep_duplicates)


def bands_view(result: Any) -> str:
    return band_table(result.summary)


def bands_figure(result: Any, *, band: bool, keep_duplicates: bool) -> Any:
    from posviz.plots.band_trajectory import plot_band_trajectory

    return plot_band_trajectory(result.summary, result.rows[0]["band_wavelength"], keep_duplicates=keep_duplicates)


def attention_view(result: Any) -> str:
    return attention_table(result.rows)


def attention_figure(result: Any, *, band: bool, keep_duplicates: bool) -> Any:
    from posviz.plots.trajectory import ATTENTION_PANELS, SPAN_PANEL, plot_trajectory

    panels = ATTENTION_PANELS + ((SPAN_PANEL,) if all("span90" in r for r in result.rows) else ())
    return plot_trajectory(result.rows, band=band, panels=panels, null_label="null mean (rows shuffled)",
                           title="Attention on text along training (posviz attention)", keep_duplicates=keep_duplicates)


def hidden_view(result: Any) -> str:
    return hidden_table(result.rows)


def hidden_figure(result: Any, *, band: bool, keep_duplicates: bool) -> Any:
    from posviz.plots.trajectory import HIDDEN_PANELS, plot_trajectory

    return plot_trajectory(result.rows, band=band, panels=HIDDEN_PANELS, null_label="null / baseline",
                           title="Position in the hidden states along training (posviz hidden)", keep_duplicates=keep_duplicates)


def columns_view(result: Any, measure: Any) -> str:
    """A measure without its own table: one line per checkpoint, its ``columns``, grouped by series."""
    columns = [("step", 10, lambda r: r["step"])] + [(label, max(10, len(label)), _score_of(key)) for key, label in measure.columns]
    return _grouped_table(result.rows, columns, f"{measure.name}: {measure.summary} (from {measure.origin}).")


def columns_figure(result: Any, measure: Any, *, band: bool, keep_duplicates: bool) -> Any:
    """A measure without its own figure: one panel per column against step."""
    from posviz.plots.trajectory import plot_trajectory

    panels = [(key, "", "", label) for key, label in measure.columns]
    return plot_trajectory(result.rows, band=band, panels=panels, title=f"{measure.name} along training ({measure.origin})",
                           keep_duplicates=keep_duplicates)


def command(
    sources: Annotated[list[str], typer.Argument(help="posviz train run folders (every kept checkpoint), RUN@STEP (one of them) and/or hub ids whose name carries the step (org/name-step_20k); with --revisions, one hub id.", show_default=False)],
    revisions: Annotated[str | None, typer.Option("--revisions", metavar="R1,R2,...", help="Revisions (branches, tags, commits) of the one hub id SOURCE, each a checkpoint; steps from their names (step_20k, step-20000, 20k) or --steps.")] = None,
    steps: Annotated[str | None, typer.Option("--steps", metavar="S1,S2,...", help="Steps of the ids (or of the --revisions), one per id in order (for names without a step; 20k = 20000).")] = None,
    fmt: Annotated[OutputFormat, typer.Option("--format", "-f", help="Format of the rows on stdout.")] = OutputFormat.table,
    output: Annotated[list[Path] | None, typer.Option("--output", "-o", help="Rows (.txt/.csv/.json) and/or the figure (.png/.pdf/.svg); repeatable.")] = None,
    plot: Annotated[Path | None, typer.Option("--plot", help="Write the figure here (.png/.pdf/.svg).")] = None,
    band: Annotated[bool, typer.Option("--band", help="In the figure: mean ± sd over series at their common steps.")] = False,
    null_draws: Annotated[int, typer.Option("--null-draws", min=0, help=HELP_NULL_DRAWS)] = 10,
    seed: Annotated[int, typer.Option("--seed", help="Seed for the null baseline.")] = 0,
    normalize: Annotated[Normalize, typer.Option("--normalize", help="none: E Eᵀ; cosine: unit rows; center: column means removed.")] = Normalize.none,
    positions: Annotated[str | None, typer.Option("--positions", help=HELP_POSITIONS)] = None,
    table: Annotated[str | None, typer.Option("--table", help=HELP_TABLE)] = None,
    allow_missing: Annotated[bool, typer.Option("--allow-missing", help="Go on without checkpoints that cannot be had offline.")] = False,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Neither read nor write the posviz score cache.")] = False,
    dpi: Annotated[int, typer.Option("--dpi", min=30, max=1200, help="Resolution of PNG output.")] = 150,
    measure: Annotated[str, typer.Option("--measure", help="toeplitzness: of P = E_P E_Pᵀ (weights); bands: RoPE band usage per head (posviz heads); attention: of the attention each checkpoint produces on --corpus (posviz attention), on the same token blocks for every checkpoint; hidden: position in the hidden states on --corpus (posviz hidden); extrapolate: held-out loss on --corpus at --seq-len n, 2n and 4n positions (posviz extrapolate); attention,hidden: both on one pass per checkpoint (each output gets the measure's name: rows.csv -> rows-attention.csv, rows-hidden.csv); a measure another package registers (posviz measures lists them); auto: bands for RoPE models, else toeplitzness.")] = "auto",
    layers: Annotated[str | None, typer.Option("--layers", help="--measure bands: 'all' or a list like 0,2,5-7 (default 0); --measure attention: layers whose heads are averaged (default all); --measure hidden: layers measured (default all; 0 = embedding output).")] = None,
    probe: Annotated[str | None, typer.Option("--probe", help="--measure bands: content probe of the profiles (as posviz heads --probe; default mean).")] = None,
    corpus: Annotated[str | None, typer.Option("--corpus", help="--measure attention, hidden and extrapolate: the fixed corpus (text file, folder, cpython-3.11.7-docstrings[:N]; default: the packaged corpus).", show_default=False)] = None,
    seq_len: Annotated[int, typer.Option("--seq-len", min=2, help="--measure attention and hidden: positions per block; extrapolate: n, the shortest of its three lengths.")] = 128,
    max_blocks: Annotated[int, typer.Option("--max-blocks", min=1, help="--measure attention and hidden: blocks of the corpus; extrapolate: windows of 4n that make the text.")] = 64,
    keep_duplicates: Annotated[bool, typer.Option("--keep-duplicates", help="Draw checkpoints that repeat another checkpoint's content, or break from both neighbours, as genuine (rows and tables still mark them).")] = False,
) -> None:
    """Toeplitzness of E_P along a checkpoint series, sorted by step, with the null baseline.

    Rows have the fields of `posviz toeplitzness --format json` plus series and step.
    With --measure attention: the attention each checkpoint produces on one fixed set
    of token blocks (posviz attention), means over the heads of --layers.
    Examples: posviz trajectory runs/abs --plot abs.png;
    posviz trajectory runs/abs --measure attention --corpus cpython-3.11.7-docstrings:500 --seq-len 64 --plot abs-attention.png;
    posviz trajectory google/multiberts-seed_0-step_{0,20,200,2000}k -o seed0.csv;
    posviz trajectory EleutherAI/pythia-70m --revisions step1000,step8000,step143000
    (a RoPE model: band usage per head, as --measure bands; rows as posviz heads' band fields plus series and step).
    Every measure checks the series first: rows gain duplicate_of (the checkpoint whose content it repeats),
    suspect and reason (docs/trajectory.md, "Can the series be trusted?").
    """
    from posviz.cli.messages import report_error
    from posviz.series.trajectory import trajectory
    from posviz.train.processes import training_processes

    figures, texts = split_outputs(output, plot=plot)
    with training_processes(report=report_error) as rank:  # under torchrun (--measure hidden): checkpoints shared out
        result = trajectory(sources, measure=measure, revisions=_parse_revisions(revisions), steps=_parse_steps(steps),
                            corpus=corpus, seq_len=seq_len, max_blocks=max_blocks, layers=layers, probe=probe,
                            positions=positions, table=table, normalize=normalize.value, null_draws=null_draws, seed=seed,
                            allow_missing=allow_missing, cache=not no_cache)
    if rank != 0:  # the main process writes
        return
    if isinstance(result, dict):  # several text measures on one pass: each measure's outputs named after it
        for name, part in result.items():
            if not texts and fmt is OutputFormat.table:
                typer.echo(f"--measure {name}")
            _write(part, [(_named(path, name), kind) for path, kind in texts], [_named(path, name) for path in figures],
                   fmt, band=band, dpi=dpi, keep_duplicates=keep_duplicates)
        return
    if result.cache_hits:
        typer.echo(f"{result.cache_hits} of {len(result.rows)} scores read from the posviz score cache (--no-cache recomputes)", err=True)
    _write(result, texts, figures, fmt, band=band, dpi=dpi, keep_duplicates=keep_duplicates)


def _named(path: Path, measure: str) -> Path:
    """``rows.csv`` -> ``rows-attention.csv``: one output per measure when several run together."""
    return path.with_name(f"{path.stem}-{measure}{path.suffix}")


def _write(result: Any, texts: list[tuple[Path, str]], figures: list[Path], fmt: OutputFormat, *, band: bool, dpi: int,
           keep_duplicates: bool = False) -> None:
    """Rows to the text outputs (or stdout) and the figure to every figure path, with the views of the result's measure."""
    from functools import partial

    from posviz.measures import get_measure

    measure = get_measure(result.measure)
    table = measure.load("table") if measure.table else partial(columns_view, measure=measure)
    figure = measure.load("figure") if measure.figure else partial(columns_figure, measure=measure)

    write_outputs(texts, figures, fmt.value, rows_renderer(result.rows, lambda: table(result)),
                  one_figure(lambda: figure(result, band=band, keep_duplicates=keep_duplicates), dpi))
