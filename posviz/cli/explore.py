"""``posviz explore``: an interactive offline explorer of models and runs, as one self-contained HTML file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from posviz.cli.options import HELP_POSITIONS, HELP_TABLE, default_output, text_measures


def command(
    models: Annotated[list[str], typer.Argument(help="Model folders, weight files, hub ids (org/name or org/name@REV), posviz train run folders (adds a Series tab) or controls (sinusoidal[:NxD], gaussian[:NxD][:SEED]); at most 4.", show_default=False)],
    output: Annotated[Path | None, typer.Option("--output", "-o", help="The HTML file to write; default explore-MODEL.html.")] = None,
    corpus: Annotated[str | None, typer.Option("--corpus", help="Add the Attention and Hidden-states tabs, measured on this corpus (as posviz attention reads it: a text file, a folder, or the packaged cpython-3.11.7-docstrings).")] = None,
    layers: Annotated[str, typer.Option("--layers", help="Layers of the Heads and Attention tabs: 'all' or a list like 0,2,5-7.")] = "all",
    heads: Annotated[bool, typer.Option("--heads/--no-heads", help="Include the Heads tab (every head of every chosen layer).")] = True,
    max_positions: Annotated[int, typer.Option("--max-positions", min=16, help="Show P exactly up to this many positions, block-averaged above.")] = 512,
    positions: Annotated[str | None, typer.Option("--positions", help=HELP_POSITIONS)] = None,
    table: Annotated[str | None, typer.Option("--table", help=HELP_TABLE)] = None,
    null_draws: Annotated[int, typer.Option("--null-draws", min=0, help="Row permutations for the spread of P's null (its mean is exact).")] = 10,
    seq_len: Annotated[int, typer.Option("--seq-len", min=2, help="With --corpus: positions per block.")] = 128,
    max_blocks: Annotated[int, typer.Option("--max-blocks", min=1, help="With --corpus: blocks of the corpus to run.")] = 32,
    measure: Annotated[list[str] | None, typer.Option("--measure", metavar="NAME", help="With --corpus: add this measure of the registry that runs on text (posviz measures lists them, e.g. state-norms) to a Measures tab, on the same pass (repeatable).")] = None,
) -> None:
    """Write one self-contained, offline HTML explorer of the models (tabs: P, Heads, Attention, Series, Comparison).

    P = E Eᵀ with zoom, pan and a hover readout of (i, j, k = j − i, value), its
    diagonal profile linked to the map, the Toeplitz projection and residual, and the
    headline off-diagonal R² with its null; every head of every layer (layer slider,
    thumbnails, the clicked head at full resolution, sortable scores; RoPE band
    energy); with --corpus, the attention and hidden-state statistics; for a run
    folder, P along its checkpoints; several models side by side with synced zoom.
    plotly.js is inlined once: the file opens with no network (docs/explore.md).

    To pair it with a PDF report: posviz report MODEL --html -o MODEL.pdf writes
    both (MODEL.html beside the PDF).

    Example: posviz explore sentence-transformers/all-MiniLM-L6-v2 -o explorer.html
    """
    from posviz.errors import OptionError
    from posviz.explorer.explorer import check_models, explore
    from posviz.util.atomic import check_output_path

    check_models(models)  # before any work: the limit, then the output path
    if output is None:
        output = default_output("explore", models, ".html")
    if output.is_dir():
        raise OptionError(f"output path {output} is a directory", "give a file name such as explorer.html")
    check_output_path(output, (".html", ".htm"))
    measures = text_measures(measure or [], corpus)
    page = explore(models, corpus=corpus, heads=heads, layers=layers, max_positions=max_positions, positions=positions,
                   table=table, null_draws=null_draws, seq_len=seq_len, max_blocks=max_blocks, progress=True, measures=measures)
    page.save(output)
    typer.echo(f"wrote {output} ({page.size / 2**20:.1f} MiB)", err=True)
