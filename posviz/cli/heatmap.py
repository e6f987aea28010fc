"""``posviz heatmap``: heatmaps of P = E_P E_P^T."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from posviz.cli.options import (
    HELP_MODELS,
    HELP_NORMALIZE,
    HELP_POSITIONS,
    HELP_TABLE,
    HELP_VARIANT,
    Normalize,
    default_output,
)


def command(
    models: Annotated[list[str], typer.Argument(help=HELP_MODELS, show_default=False)],
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Figure file (.png, .pdf, .svg); default heatmap-MODEL.png.")] = None,
    positions: Annotated[str | None, typer.Option("--positions", help=HELP_POSITIONS)] = None,
    normalize: Annotated[Normalize, typer.Option("--normalize", help=HELP_NORMALIZE)] = Normalize.none,
    cmap: Annotated[str, typer.Option("--cmap", help="Matplotlib colormap (hot matches the TISA paper).")] = "hot",
    shared_scale: Annotated[bool, typer.Option("--shared-scale/--own-scale", help="One colour scale for all models.")] = False,
    robust: Annotated[bool, typer.Option("--robust/--full-range", help="Clip colours to the 1st-99th percentile.")] = True,
    profile: Annotated[bool | None, typer.Option("--profile/--no-profile", help="Diagonal-profile panel under each map (default: single model only).")] = None,
    table: Annotated[str | None, typer.Option("--table", help=HELP_TABLE)] = None,
    max_pixels: Annotated[int, typer.Option("--max-pixels", min=16, help="Block-average larger matrices to this many cells per side.")] = 1024,
    exclude_diagonal: Annotated[bool, typer.Option("--exclude-diagonal/--full", help=HELP_VARIANT)] = True,
    dpi: Annotated[int, typer.Option("--dpi", min=30, max=1200, help="Resolution of PNG output.")] = 150,
) -> None:
    """Draw P = E Eᵀ for one or more models (several models: one grid figure).

    Each panel's title gives its Toeplitzness (off-diagonal R² unless --full),
    null and excess, as `posviz toeplitzness` prints them.

    Example: posviz heatmap albert-base-v2 -o albert.png
    """
    from posviz.errors import OptionError
    from posviz.plots.common import FIGURE_EXTENSIONS, save_figure
    from posviz.util.atomic import check_output_path

    if output is None:
        output = default_output("heatmap", models, ".png")
    check_output_path(output, FIGURE_EXTENSIONS)
    import matplotlib.colors

    if cmap not in matplotlib.colormaps:
        raise OptionError(f"unknown colormap {cmap!r}", "see matplotlib's colormap list, e.g. hot, viridis, RdBu_r")
    from posviz.plots.heatmap import plot_heatmap
    from posviz.read.embeddings import load_position_embeddings
    from posviz.util.progress import progress

    items = [load_position_embeddings(m, table=table, positions=positions) for m in progress(models, "loading")]
    fig = plot_heatmap(items, normalize=normalize.value, cmap=cmap, shared_scale=shared_scale, robust=robust, profile=profile, max_pixels=max_pixels,
                       exclude_diagonal=exclude_diagonal)
    save_figure(fig, output, dpi=dpi)
    typer.echo(f"wrote {output}", err=True)
