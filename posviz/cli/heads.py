"""``posviz heads``: per-head positional attention maps, offset profiles and Toeplitzness."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from posviz.cli.options import HELP_POSITIONS, HELP_VARIANT, OutputFormat, rows_renderer, split_outputs, write_outputs

if TYPE_CHECKING:
    from posviz.plots.heads import HeadMapOptions
    from posviz.scoring.layers import LayerScores, LayerTable

TEXT_EXTENSIONS = {".txt": "table", ".csv": "csv", ".json": "json"}


class LnMode(str, Enum):
    none = "none"
    ln = "ln"
    ln_type0 = "ln+type0"


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
    exclude_diagonal: Annotated[bool, typer.Option("--exclude-diagonal/--full", help=HELP_VARIANT)] = True,
    probe: Annotated[str | None, typer.Option("--probe", help="RoPE models: content probe of each head's profile f_h(k): mean (default: mean token embedding after the layer's input norm), token:ID|TEXT, corpus:FILE, or none/content-free (the weight-free kernel).", show_default=False)] = None,
    context: Annotated[int | None, typer.Option("--context", min=1, help="RoPE models: the trained context length T in tokens; beyond_context_share is each head's band-energy share in bands whose wavelength 2π/θ_b exceeds T. Default: original_max_position_embeddings, else max_position_embeddings.", show_default=False)] = None,
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
    kernel Σ cos(kθ_i), DeBERTa's relative-embedding Gram matrix. RoPE models,
    from one layer's W_Q/W_K: band energy per head over the rotary frequencies
    (band 0 the highest), dominant band, high-frequency share, the share beyond
    the trained context (--context), and the profile f_h(k) of a content probe
    (--probe). Every output states the conventions used.

    Example: posviz heads albert-base-v2 --layer 0 -o albert-heads.png
    """
    from posviz.errors import OptionError
    from posviz.extract.registry import open_heads
    from posviz.scoring.layers import LayerTable, parse_layers, scan_layers

    figures, texts = split_outputs(output)
    if figures:
        import matplotlib

        if cmap not in matplotlib.colormaps:
            raise OptionError(f"unknown colormap {cmap!r}", "see matplotlib's colormap list, e.g. viridis, hot, RdBu_r")
    heads = open_heads(model, ln=ln.value, bias=bias, positions=positions, table=table, probe=probe, context=context)
    scanned = LayerTable(heads.metadata())
    chosen = parse_layers(layer, layers, heads.num_layers, scanned.metadata["model"])
    keep = chosen if figures and len(chosen) == 1 else ()
    last = None
    for scored in scan_layers(heads, chosen, null_draws=null_draws, seed=seed, keep=keep, progress_label="layer"):
        scanned.add(scored)
        last = scored
    rows = scanned.rows(exclude_diagonal=exclude_diagonal, profiles=profiles)

    def table() -> str:
        from posviz.cli.tables import heads_table, rope_heads_table

        if "band_energy" in rows[0]:
            return rope_heads_table(rows, conventions=scanned.convention_line)
        return heads_table(rows, chosen, exclude_diagonal=exclude_diagonal, conventions=scanned.convention_line)

    def draw(path: Path) -> list[Path]:
        from posviz.plots.heads import HeadMapOptions

        if "band_energy" in rows[0]:
            _bands_figure(path, scanned, rows, last, cmap=cmap, dpi=dpi)
        else:
            options = HeadMapOptions(cmap=cmap, robust=robust, shared_scale=shared_scale, max_pixels=max_pixels,
                                     exclude_diagonal=exclude_diagonal)
            _figure(path, heads, scanned, last, options=options, dpi=dpi)
        return [path]

    write_outputs(texts, figures, fmt.value, rows_renderer(rows, table), draw)


def _figure(path: Path, heads, scanned: LayerTable, last: LayerScores | None, *, options: HeadMapOptions, dpi: int) -> None:
    """The head grid of one layer (``last`` holds its stack), or the layer x head matrix of several."""
    from dataclasses import replace

    from posviz.plots.common import save_figure
    from posviz.plots.heads import plot_heads, plot_layer_head_matrix
    from posviz.scoring.layers import first_position

    meta, layers, sfx = scanned.metadata, scanned.indices, "_offdiag" if options.exclude_diagonal else ""
    title = f"{meta['model']}: {meta['scheme']}"
    if len(layers) == 1:
        stack = last.stack
        options = replace(options, first_position=first_position(heads), causal=last.causal,
                          axis_label="relative position" if meta.get("family") == "deberta" else "position")
        fig = plot_heads(stack, last.scores, title=f"{title}, layer {layers[0]} ({stack.heads} heads, {stack.n} positions)",
                         conventions=scanned.convention_line, options=options)
    else:
        fig = plot_layer_head_matrix(scanned.matrix("toeplitzness" + sfx), layers=layers,
                                     title=f"{title} ({len(layers)} layers × {heads.num_heads} heads)",
                                     conventions=scanned.convention_line, null_mean=scanned.matrix("null_mean" + sfx),
                                     exclude_diagonal=options.exclude_diagonal)
    save_figure(fig, path, dpi=dpi)


def _bands_figure(path: Path, scanned: LayerTable, rows: list[dict], last: LayerScores | None, *, cmap: str, dpi: int) -> None:
    """RoPE: the head x band heatmap, probe profiles (one layer) and high-frequency shares."""
    from posviz.plots.common import save_figure
    from posviz.plots.rope_bands import plot_rope_bands

    meta, layers = scanned.metadata, scanned.indices
    one = len(layers) == 1
    profiles = last.stack.offsets if one and last is not None and last.stack is not None else None
    where = f"layer {layers[0]}" if one else f"layers {', '.join(map(str, layers))}"
    fig = plot_rope_bands(rows, profiles, title=f"{meta['model']}: RoPE band energy per head, {where}",
                          conventions=scanned.convention_line, cmap=cmap,
                          row_labels=None if one else [f"{r['layer']}.{r['head']}" for r in rows])
    save_figure(fig, path, dpi=dpi)
