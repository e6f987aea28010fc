"""``posviz report``: one PDF with everything posviz knows about the given models."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from posviz.cli.options import (
    HELP_MODELS,
    HELP_NORMALIZE,
    HELP_NULL_DRAWS,
    HELP_POSITIONS,
    HELP_TABLE,
    Metric,
    Normalize,
    default_output,
    text_measures,
)


def command(
    models: Annotated[list[str], typer.Argument(help=HELP_MODELS + " A `posviz train` run folder (--out) is a training run.", show_default=False)],
    output: Annotated[Path | None, typer.Option("--output", "-o", help="PDF file to write (replaced only when complete); default report-MODEL.pdf.")] = None,
    title: Annotated[str | None, typer.Option("--title", help="Report title (default: names the models).")] = None,
    positions: Annotated[str | None, typer.Option("--positions", help=HELP_POSITIONS)] = None,
    table: Annotated[str | None, typer.Option("--table", help=HELP_TABLE)] = None,
    normalize: Annotated[Normalize, typer.Option("--normalize", help=HELP_NORMALIZE)] = Normalize.none,
    null_draws: Annotated[int, typer.Option("--null-draws", min=0, help=HELP_NULL_DRAWS)] = 10,
    seed: Annotated[int, typer.Option("--seed", help="Seed for the null baseline.")] = 0,
    cmap: Annotated[str, typer.Option("--cmap", help="Colormap of the heatmaps (hot matches the TISA paper).")] = "hot",
    max_pixels: Annotated[int, typer.Option("--max-pixels", min=16, help="Heatmaps of larger matrices show exact block means, this many per side.")] = 512,
    score: Annotated[list[str] | None, typer.Option("--score", metavar="MODEL=VALUE", help="Benchmark value of a report input (in --metric's units), placing it on the ALBERT v1 → v2 figure (repeatable).")] = None,
    metric: Annotated[Metric, typer.Option("--metric", help="Benchmark on the ALBERT figure's y axis (squad1/squad2: (F1+EM)/2).")] = Metric.average,
    layers: Annotated[str, typer.Option("--layers", help="Layers whose head grids get a page: 0 (default), a list like 0,5-7, or all; the layer × head page covers every layer.")] = "0",
    albert: Annotated[bool, typer.Option("--albert/--no-albert", help="Include the ALBERT v1 → v2 section (scores the eight ALBERT checkpoints from the caches, or downloads their weights when online).")] = True,
    corpus: Annotated[str | None, typer.Option("--corpus", help="Add the attention and hidden-states sections on this corpus (--attention-corpus and --hidden-corpus, where not given): each model is loaded once and runs one pass over the text for both.")] = None,
    measure: Annotated[list[str] | None, typer.Option("--measure", metavar="NAME", help="Add a page per model for this measure of the registry that runs on text (posviz measures lists them, e.g. state-norms), on --corpus and in the same pass (repeatable).")] = None,
    attention_corpus: Annotated[str | None, typer.Option("--attention-corpus", help="Add the attention section (posviz attention): run each model over this corpus (text file, folder, cpython-3.11.7-docstrings[:N]); --layers chooses the layers.")] = None,
    attention_seq_len: Annotated[int, typer.Option("--attention-seq-len", min=2, help="Positions per block of the attention section.")] = 128,
    attention_max_blocks: Annotated[int, typer.Option("--attention-max-blocks", min=1, help="Blocks of the attention section.")] = 64,
    hidden_corpus: Annotated[str | None, typer.Option("--hidden-corpus", help="Add the hidden-states section (posviz hidden): run each model over this corpus (text file, folder or the demo corpus); every layer.")] = None,
    hidden_seq_len: Annotated[int, typer.Option("--hidden-seq-len", min=2, help="Positions per block of the hidden-states section.")] = 128,
    hidden_max_blocks: Annotated[int, typer.Option("--hidden-max-blocks", min=1, help="Blocks of the hidden-states section.")] = 64,
    extrapolate_lengths: Annotated[str | None, typer.Option("--extrapolate-lengths", help="Add the extrapolation section (posviz extrapolate): loss and attention entropy of each model at these lengths, e.g. 64,128,256,512,1024.")] = None,
    extrapolate_corpus: Annotated[str, typer.Option("--extrapolate-corpus", help="Corpus of the extrapolation section.")] = "cpython-3.11.7-docstrings",
    extrapolate_max_blocks: Annotated[int, typer.Option("--extrapolate-max-blocks", min=1, help="Blocks of the longest length that make the extrapolation section's text.")] = 4,
    html: Annotated[bool, typer.Option("--html", help="Also write the interactive explorer of the same models (posviz explore) beside the PDF, as REPORT.html; at most 4 models.")] = False,
) -> None:
    """Write a PDF report: title page, summary table, P heatmaps with profiles,
    ALBERT v1 → v2 figure, training runs, methods.

    Inputs are models (as for the other commands) and `posviz train` run folders.
    Byte-identical for identical input when SOURCE_DATE_EPOCH is set; written
    atomically (an interrupted run leaves no partial file and keeps an old one).
    Examples: posviz report bert-base-uncased roberta-base -o positions.pdf;
    posviz report runs/absolute-tiny-s0 runs/tisa-tiny-s0 -o runs.pdf
    """
    from posviz.errors import OptionError
    from posviz.util.atomic import check_output_path

    if corpus is not None:  # both text sections; where their corpus, length and blocks agree, they share one pass
        attention_corpus = attention_corpus or corpus
        hidden_corpus = hidden_corpus or corpus
    text_corpus = corpus or attention_corpus or hidden_corpus
    measures = text_measures(measure or [], text_corpus)

    if output is None:
        output = default_output("report", models, ".pdf")
    check_output_path(output, (".pdf",))
    if html:
        from posviz.explorer.explorer import MAX_MODELS

        if len(models) > MAX_MODELS:
            raise OptionError(f"--html shows at most {MAX_MODELS} models side by side, got {len(models)}",
                              "leave out --html, or run posviz explore on fewer models")
        check_output_path(output.with_suffix(".html"), (".html",))
    import matplotlib

    if cmap not in matplotlib.colormaps:
        raise OptionError(f"unknown colormap {cmap!r}", "see matplotlib's colormap list, e.g. hot, viridis, RdBu_r")
    from posviz.reference.albert import parse_score_options
    from posviz.report import ReportOptions, build_context, render_report
    from posviz.util.progress import progress

    options = ReportOptions(title=title, normalize=normalize.value, null_draws=null_draws, seed=seed, positions=positions,
                            table=table, max_pixels=max_pixels, cmap=cmap, metric=metric.value,
                            scores=parse_score_options(score), albert=albert, layers=layers,
                            attention_corpus=attention_corpus, attention_seq_len=attention_seq_len,
                            attention_max_blocks=attention_max_blocks, hidden_corpus=hidden_corpus,
                            hidden_seq_len=hidden_seq_len, hidden_max_blocks=hidden_max_blocks, measures=measures,
                            measures_corpus=text_corpus,
                            measures_seq_len=attention_seq_len if attention_corpus else hidden_seq_len,
                            measures_max_blocks=attention_max_blocks if attention_corpus else hidden_max_blocks,
                            extrapolate_lengths=extrapolate_lengths, extrapolate_corpus=extrapolate_corpus,
                            extrapolate_max_blocks=extrapolate_max_blocks)
    ctx = build_context(models, options, progress=lambda items: progress(items, "loading"))
    explorer = None
    if html:  # made before the PDF is written: an error leaves neither file
        from posviz.explorer.explorer import explore
        from posviz.report.sections.running import run_text_passes

        explorer = explore(models, corpus=text_corpus, positions=positions, table=table,
                           null_draws=null_draws, seed=seed, measured=run_text_passes(ctx), measures=measures)
    render_report(ctx, output)
    typer.echo(f"wrote {output} ({len(ctx.included)} sections: {', '.join(ctx.included)})", err=True)
    if explorer is not None:
        explorer.save(output.with_suffix(".html"))
        typer.echo(f"wrote {output.with_suffix('.html')} (the explorer: open it in a browser, offline)", err=True)

