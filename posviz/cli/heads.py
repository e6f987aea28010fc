"""``posviz heads``: per-head positional attention maps, offset profiles and Toeplitzness."""

from __future__ import annotations

import re
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from posviz.cli.common import HELP_POSITIONS, OutputFormat, emit, progress, to_csv, to_json

TEXT_EXTENSIONS = {".txt": "table", ".csv": "csv", ".json": "json"}


class LnMode(str, Enum):
    none = "none"
    ln = "ln"
    ln_type0 = "ln+type0"


def parse_layers(layer: int | None, layers: str | None, num_layers: int, label: str = "the model") -> list[int]:
    """Layers requested by ``--layer L`` or ``--layers all|A,B,C-D`` (default: layer 0).

    Raises
    ------
    OptionError
        Both options given, a malformed list, or a layer out of range.
    """
    from posviz.errors import OptionError

    if layer is not None and layers is not None:
        raise OptionError("give either --layer or --layers, not both")
    if layers is None:
        chosen = [0 if layer is None else layer]
    elif layers.strip().lower() == "all":
        chosen = list(range(num_layers))
    else:
        chosen = []
        for part in layers.split(","):
            m = re.fullmatch(r"\s*(-?\d+)\s*(?:-\s*(-?\d+)\s*)?", part)
            if not m:
                raise OptionError(f"--layers {layers!r} is not 'all' or a list like 0,2,5-7")
            a, b = int(m.group(1)), int(m.group(2) if m.group(2) is not None else m.group(1))
            if b < a:
                raise OptionError(f"--layers range {a}-{b} is empty")
            chosen += list(range(a, b + 1))
    for x in chosen:
        if not 0 <= x < num_layers:
            raise OptionError(f"--layer {x} is out of range: {label} has {num_layers} layers (0-{num_layers - 1})")
    return list(dict.fromkeys(chosen))


def _outputs(paths: list[Path] | None) -> tuple[list[Path], list[tuple[Path, str]]]:
    """Split ``-o`` paths into figures and text files, validating each before any work."""
    from posviz.plots.common import FIGURE_EXTENSIONS
    from posviz.util.atomic import check_output_path

    figures, texts = [], []
    for p in paths or []:
        ext = p.suffix.lower()
        check_output_path(p, (*FIGURE_EXTENSIONS, *TEXT_EXTENSIONS))
        if ext in TEXT_EXTENSIONS:
            texts.append((p, TEXT_EXTENSIONS[ext]))
        else:
            figures.append(p)
    return figures, texts


_FIRST = ("model", "layer", "head", "toeplitzness", "toeplitzness_offdiag", "null_mean", "null_mean_offdiag",
          "null_std", "null_std_offdiag", "excess", "excess_offdiag", "peak_offset", "f_hat_0")


def _row(meta: dict[str, Any], conv: dict[str, Any], layer: int, head: dict[str, Any], variant: str) -> dict[str, Any]:
    row = {**meta, **conv, **head, "layer": layer, "variant": variant}
    first = {k: row[k] for k in _FIRST if k in row}
    return {**first, **{k: v for k, v in row.items() if k not in first}}


def _fmt(x: float | None, digits: int = 4) -> str:
    return "—" if x is None or x != x else f"{x:.{digits}f}"


def render_table(rows: list[dict[str, Any]], layers: list[int], *, exclude_diagonal: bool, footnote: str) -> str:
    """Per-head table (one layer) or layer x head matrix (several layers), with conventions."""
    from rich.console import Console
    from rich.table import Table

    key = "toeplitzness_offdiag" if exclude_diagonal else "toeplitzness"
    other = "toeplitzness" if exclude_diagonal else "toeplitzness_offdiag"
    sfx = "_offdiag" if exclude_diagonal else ""
    t = Table(show_edge=False, header_style="bold")
    heads = sorted({r["head"] for r in rows})
    if len(layers) == 1:
        for col in ("head", "Toeplitzness", "full" if exclude_diagonal else "off-diag", "null", "excess", "peak k", "f̂(0)"):
            t.add_column(col, justify="right")
        for r in rows:
            null = _fmt(r["null_mean" + sfx])
            if r.get("null_std" + sfx) == r.get("null_std" + sfx) and r.get("null_std" + sfx) is not None:
                null += f" ± {_fmt(r['null_std' + sfx])}"
            t.add_row(str(r["head"]), _fmt(r[key]), _fmt(r[other]), null, _fmt(r["excess" + sfx], 3),
                      str(r["peak_offset"]), f"{r['f_hat_0']:.4g}")
        width = 120
    else:
        t.add_column("layer", justify="right")
        for h in heads:
            t.add_column(f"h{h}", justify="right")
        t.add_column("mean", justify="right")
        by = {(r["layer"], r["head"]): r[key] for r in rows}
        for layer in layers:
            vals = [by[(layer, h)] for h in heads]
            t.add_row(str(layer), *[f"{v:.3f}" for v in vals], f"{sum(vals) / len(vals):.3f}")
        width = max(120, 8 * (len(heads) + 2))
    console = Console(width=width, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(t)
    console.print(footnote, soft_wrap=False)
    text = console.export_text()
    return text if text.endswith("\n") else text + "\n"


def _footnote(rows: list[dict[str, Any]], conv_line: str, *, exclude_diagonal: bool, many_layers: bool) -> str:
    r0 = rows[0]
    variant = "off-diagonal (main diagonal excluded)" if exclude_diagonal else "full (all n² entries)"
    what = "Toeplitzness R² per layer (rows) and head (columns)" if many_layers else "per-head Toeplitzness"
    lines = [
        f"{r0['model']}: {r0['scheme']}; {r0['positions']} positions.",
        f"{what}, variant {variant}; null: {r0['null_method']}"
        + ("; excess = (R² − null)/(1 − null)" if r0["null_mean"] == r0["null_mean"] else "")
        + ("." if many_layers else "; peak k = argmax of f̂(k), the mean of diagonal k = j − i, over |k| ≤ n/2."),
        f"Conventions: {conv_line}.",
    ]
    return "\n".join(lines)


def command(
    model: Annotated[str, typer.Argument(help="Model folder, weight file or hub id (org/name[@rev]).", show_default=False)],
    layer: Annotated[int | None, typer.Option("--layer", "-l", help="Layer to show (default 0).")] = None,
    layers: Annotated[str | None, typer.Option("--layers", help="Several layers: 'all' or a list like 0,2,5-7.")] = None,
    output: Annotated[list[Path] | None, typer.Option("--output", "-o", help="Figure (.png/.pdf/.svg) and/or scores (.txt/.csv/.json); repeatable.")] = None,
    fmt: Annotated[OutputFormat, typer.Option("--format", "-f", help="Format of the scores on stdout.")] = OutputFormat.table,
    ln: Annotated[LnMode, typer.Option("--ln", help="Input of absolute models: none = E_P; ln = through the LayerNorm(s) before attention; ln+type0 = E_P + token_type[0] through them.")] = LnMode.ln,
    bias: Annotated[bool, typer.Option("--bias/--no-bias", help="Include the query/key projection biases.")] = True,
    positions: Annotated[str | None, typer.Option("--positions", help=HELP_POSITIONS + " Relative schemes: default 0:512.")] = None,
    table: Annotated[str | None, typer.Option("--table", help="BART/mBART/T5: encoder or decoder (default encoder).")] = None,
    null_draws: Annotated[int, typer.Option("--null-draws", min=0, help="Also sample this many seeded row permutations for the null's spread (the null mean is exact).")] = 0,
    seed: Annotated[int, typer.Option("--seed", help="Seed for --null-draws.")] = 0,
    exclude_diagonal: Annotated[bool, typer.Option("--exclude-diagonal", help="Headline the Toeplitzness variant without the main diagonal.")] = False,
    profiles: Annotated[bool, typer.Option("--profiles", help="Include each head's offset profile f̂(k) in JSON/CSV output.")] = False,
    cmap: Annotated[str, typer.Option("--cmap", help="Matplotlib colormap of the head maps.")] = "viridis",
    robust: Annotated[bool, typer.Option("--robust/--full-range", help="Clip the colour scale to the 1st-99th percentile.")] = True,
    shared_scale: Annotated[bool, typer.Option("--shared-scale/--own-scale", help="One colour scale for all head maps, or one per head.")] = True,
    max_pixels: Annotated[int, typer.Option("--max-pixels", min=8, help="Block-average each head map to this many cells per side.")] = 256,
    dpi: Annotated[int, typer.Option("--dpi", min=30, max=1200, help="Resolution of PNG output.")] = 150,
) -> None:
    """Position-only attention of every head: maps, offset profiles, Toeplitzness.

    Absolute-position models (BERT, RoBERTa, ALBERT, ELECTRA, DistilBERT, GPT-2,
    GPT-Neo, OPT, BART): (E_P W_Q + b_Q)(E_P W_K + b_K)ᵀ·scale per head, read from
    only that layer's tensors. Relative schemes: T5 bucket bias, ALiBi, the RoPE
    kernel Σ cos(kθ_i), DeBERTa's relative-embedding Gram matrix. Every output
    states the conventions used.

    Example: posviz heads albert-base-v2 --layer 0 -o albert-heads.png
    """
    from posviz.errors import OptionError
    from posviz.extract.registry import convention_line, open_heads, summary_convention_line

    figures, texts = _outputs(output)
    if figures:
        import matplotlib

        if cmap not in matplotlib.colormaps:
            raise OptionError(f"unknown colormap {cmap!r}", "see matplotlib's colormap list, e.g. viridis, hot, RdBu_r")
    heads = open_heads(model, ln=ln.value, bias=bias, positions=positions, table=table)
    meta = heads.metadata()
    chosen = parse_layers(layer, layers, heads.num_layers, meta["model"])
    variant = "exclude_diagonal" if exclude_diagonal else "full"
    rows: list[dict[str, Any]] = []
    conv_lines: list[str] = []
    last = None
    want_stack = bool(figures) and len(chosen) == 1
    for lay in progress(chosen, "layer"):
        stack, scores = heads.score(lay, null_draws=null_draws, seed=seed, keep=want_stack)
        conv = heads.conventions(lay)
        conv_lines.append(convention_line({**conv, "rows_note": meta.get("rows_note")}))
        rows += [_row(meta, conv, lay, h, variant) for h in scores.rows(profiles=profiles)]
        last = (stack, scores, conv)
    conv_line = summary_convention_line(conv_lines, chosen)
    many = len(chosen) > 1
    for path, kind in texts:
        emit(_render(kind, rows, chosen, exclude_diagonal, conv_line, many), path)
        typer.echo(f"wrote {path}", err=True)
    for path in figures:
        _figure(path, heads, meta, rows, chosen, last, conv_line, exclude_diagonal, cmap, robust, shared_scale, max_pixels, dpi)
        typer.echo(f"wrote {path}", err=True)
    if not texts:
        emit(_render(fmt.value, rows, chosen, exclude_diagonal, conv_line, many), None)


def _render(kind: str, rows, layers, exclude_diagonal, conv_line, many) -> str:
    if kind == "json":
        return to_json(rows)
    if kind == "csv":
        return to_csv(rows)
    return render_table(rows, layers, exclude_diagonal=exclude_diagonal,
                        footnote=_footnote(rows, conv_line, exclude_diagonal=exclude_diagonal, many_layers=many))


def _figure(path, heads, meta, rows, layers, last, conv_line, exclude_diagonal, cmap, robust, shared_scale, max_pixels, dpi) -> None:
    import numpy as np

    from posviz.plots.common import save_figure
    from posviz.plots.heads import plot_heads, plot_layer_head_matrix

    key = "toeplitzness_offdiag" if exclude_diagonal else "toeplitzness"
    nkey = "null_mean_offdiag" if exclude_diagonal else "null_mean"
    title = f"{meta['model']}: {meta['scheme']}"
    if len(layers) == 1:
        stack, scores, conv = last
        fig = plot_heads(
            stack,
            scores,
            title=f"{title}, layer {layers[0]} ({stack.heads} heads, {stack.n} positions)",
            conventions=conv_line,
            first_position=_first_position(heads),
            axis_label="relative position" if meta.get("family") == "deberta" else "position",
            causal=bool(conv.get("causal")),
            cmap=cmap,
            robust=robust,
            shared_scale=shared_scale,
            max_pixels=max_pixels,
            exclude_diagonal=exclude_diagonal,
        )
    else:
        nh = heads.num_heads
        grid = np.array([[r[key] for r in rows if r["layer"] == lay] for lay in layers]).reshape(len(layers), -1)
        null = np.array([[np.nan if r[nkey] is None else r[nkey] for r in rows if r["layer"] == lay] for lay in layers], dtype=float)
        fig = plot_layer_head_matrix(grid, layers=layers, title=f"{title} ({len(layers)} layers × {nh} heads)",
                                     conventions=conv_line, null_mean=null.reshape(grid.shape), exclude_diagonal=exclude_diagonal)
    save_figure(fig, path, dpi=dpi)


def _first_position(heads) -> int:
    pe = getattr(heads, "pe", None)
    if pe is not None:
        return int(pe.positions[0])
    return int(getattr(heads, "first_position", 0))
