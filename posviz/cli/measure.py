"""``posviz measure``: any measure of the registry on one model, posviz's own or another package's."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from posviz.cli.options import OutputFormat, one_figure, rows_renderer, split_outputs, write_outputs


def command(
    name: Annotated[str, typer.Argument(help="A measure of the registry (posviz measures lists them).", show_default=False)],
    model: Annotated[str, typer.Argument(help="Model folder, hub id, packaged model, RUN or RUN@STEP.", show_default=False)],
    corpus: Annotated[list[str] | None, typer.Option("--corpus", "-c", help="Measures on text: text file, folder, the demo corpus or a dataset id; repeatable (default: the demo corpus).", show_default=False)] = None,
    seq_len: Annotated[int, typer.Option("--seq-len", "-n", min=2, help="Measures on text: positions per block, special tokens included.")] = 128,
    max_blocks: Annotated[int, typer.Option("--max-blocks", min=1, help="Measures on text: at most this many blocks of the corpus.")] = 64,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="Measures on text: blocks per forward pass.")] = 8,
    layers: Annotated[str | None, typer.Option("--layers", help="Layers measured: 'all' or a list like 0,2,5-7 (default: the measure's).")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the measure's random draws.")] = 0,
    output: Annotated[list[Path] | None, typer.Option("--output", "-o", help="Figure (.png/.pdf/.svg) and/or records (.txt/.csv/.json); repeatable.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace existing outputs.")] = False,
    fmt: Annotated[OutputFormat, typer.Option("--format", "-f", help="Format of the records on stdout.")] = OutputFormat.table,
    dpi: Annotated[int, typer.Option("--dpi", min=30, max=1200, help="Resolution of PNG output.")] = 150,
) -> None:
    """Run one measure of the registry on one model: its records, its numbers and its figure (posviz.measures.on_text holds attention and hidden's parts).

    A measure on text (posviz's attention and hidden, state-norms, or another package's with a text-pass request)
    runs one pass over blocks of the corpus; a measure of the weights with a point function reads the checkpoint.
    Measures with a command of their own (toeplitzness, heads, bands, extrapolate) are named with it.

    Example: posviz measure state-norms sentence-transformers/all-MiniLM-L6-v2 --corpus docs.txt -o norms.png
    """
    from posviz.errors import OptionError
    from posviz.measures import SeriesOptions, get_measure
    from posviz.series.trajectory import refuse_options

    measure = get_measure(name)
    figures, texts = split_outputs(output, force=force)
    if figures and not measure.plot:
        raise OptionError(f"measure {name!r} draws no figure for one model", "write .txt, .csv or .json")
    options = SeriesOptions(corpus=", ".join(corpus) if corpus else None, seq_len=seq_len, max_blocks=max_blocks,
                            layers=layers, seed=seed)
    refuse_options(measure, options)  # as posviz trajectory: an option the measure does not use is one line, exit 2
    if measure.request:
        result = _on_text(measure, model, options, corpus, batch_size)
    elif measure.point:
        if corpus and len(corpus) > 1:
            raise OptionError(f"measure {name!r} reads one corpus, got {len(corpus)}", "give --corpus once")
        result = _Values(model, measure.load("point")(model, options))
    else:
        where = f": {measure.command} {model}" if measure.command else ""
        raise OptionError(f"measure {name!r} runs along checkpoints only (posviz trajectory --measure {name}), or with its "
                          f"own command{where}")
    rows = _records(result, measure)

    def table() -> str:
        return _table(rows, measure, getattr(result, "conventions", ""))

    write_outputs(texts, figures, fmt.value, rows_renderer(rows, table),
                  one_figure(lambda: measure.load("plot")(result), dpi) if measure.plot else None)


class _Values:
    """The result of a point measure: its numbers for one model."""

    def __init__(self, model: str, values: dict[str, Any]) -> None:
        self.model, self.values = model, values

    def records(self) -> list[dict[str, Any]]:
        return [{"model": self.model, **self.values}]


def _on_text(measure: Any, model: str, options: Any, corpus: list[str] | None, batch_size: int) -> Any:
    """The measure's result from one pass over the corpus."""
    from posviz.observe.text_pass import observe_text
    from posviz.train.corpus import DEMO_CORPUS

    request = measure.load("request")(options)
    return observe_text(model, [request], corpus=corpus or [DEMO_CORPUS], seq_len=options.seq_len,
                        max_blocks=options.max_blocks, batch_size=batch_size, show_progress=True)[measure.name]


def _records(result: Any, measure: Any) -> list[dict[str, Any]]:
    """The result's records, or one row of the measure's values where it keeps none."""
    if hasattr(result, "records"):
        return list(result.records())
    return [measure.load("values")(result)]


def _table(rows: list[dict[str, Any]], measure: Any, conventions: str) -> str:
    """The records as an aligned text table, under the measure's summary and over its conventions."""
    from posviz.util.format import score

    keys = list(dict.fromkeys(k for r in rows for k in r if not isinstance(r[k], (list, tuple, dict))))
    cells = [keys] + [[_cell(r.get(k), score) for k in keys] for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(keys))]
    lines = [f"{measure.name}: {measure.summary} (from {measure.origin})"]
    lines += ["  ".join(c[i].rjust(widths[i]) for i in range(len(keys))) for c in cells]
    if conventions:
        lines.append(conventions)
    return "\n".join(lines) + "\n"


def _cell(value: Any, score: Any) -> str:
    if isinstance(value, float):
        return score(value)
    return "" if value is None else str(value)


def attention_plot(result: Any, *, fig: Any = None) -> Any:
    """``attention``'s figure of one model: its first chosen layer's head grid, profiles and scores."""
    from posviz.plots.attention import plot_attention_layer

    return plot_attention_layer(result, result.layers[0], fig=fig)
