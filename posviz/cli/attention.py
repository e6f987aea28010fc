"""``posviz attention``: how translation-invariant the attention a model produces on a corpus is, per head."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from posviz.cli.options import Device, OutputFormat, rows_renderer, split_outputs, write_outputs


def figure_paths(path: Path, layers: list[int]) -> list[tuple[int, Path]]:
    """One figure per layer: ``PATH`` for one layer, ``STEM-layerL.SUFFIX`` for several."""
    if len(layers) == 1:
        return [(layers[0], path)]
    return [(layer, path.with_name(f"{path.stem}-layer{layer}{path.suffix}")) for layer in layers]


def command(
    model: Annotated[str, typer.Argument(help="Model folder, hub id, packaged model, RUN or RUN@STEP.", show_default=False)],
    corpus: Annotated[str, typer.Option("--corpus", "-c", help="Text file, folder, a packaged corpus (cpython-3.11.7-docstrings[:N]), stdlib-docstrings[:N] (machine-dependent) or a dataset id.")] = "cpython-3.11.7-docstrings",
    seq_len: Annotated[int, typer.Option("--seq-len", "-n", min=2, help="Positions per block, special tokens included.")] = 128,
    layers: Annotated[str, typer.Option("--layers", help="'all' or a list like 0,2,5-7.")] = "0",
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="Blocks per forward pass.")] = 8,
    max_blocks: Annotated[int, typer.Option("--max-blocks", min=0, help="At most this many blocks of the corpus (0: all).")] = 256,
    device: Annotated[Device, typer.Option("--device", help="Where the model runs (ignored with --device-map).")] = Device.cpu,
    device_map: Annotated[str | None, typer.Option("--device-map", help="'auto': accelerate spreads a model too large for one device.")] = None,
    tokenizer: Annotated[str | None, typer.Option("--tokenizer", help="Tokenizer folder or id instead of the model's (or the run's).")] = None,
    output: Annotated[list[Path] | None, typer.Option("--output", "-o", help="Figure (.png/.pdf/.svg; one per layer) and/or records (.txt/.csv/.json); repeatable.")] = None,
    fmt: Annotated[OutputFormat, typer.Option("--format", "-f", help="Format of the records on stdout.")] = OutputFormat.table,
    profiles: Annotated[bool, typer.Option("--profiles", help="Include each head's offset profile in JSON/CSV output.")] = False,
    dpi: Annotated[int, typer.Option("--dpi", min=30, max=1200, help="Resolution of PNG output.")] = 150,
    exact_maps: Annotated[bool, typer.Option("--exact-maps", help="Sum every chosen layer's whole eager attention maps (memory grows with n²) instead of computing the statistics in tiles while the model keeps its fast attention.")] = False,
    tile: Annotated[int, typer.Option("--tile", min=1, help="Queries and keys per tile of the tiled statistics.")] = 256,
    map_size: Annotated[int, typer.Option("--map-size", min=2, help="Each head's mean map is kept exactly up to this many positions, block-averaged beyond (its Toeplitzness then scores the block average).")] = 512,
    sink_eps: Annotated[float, typer.Option("--sink-eps", min=0.0, max=0.999, help="A head is a sink when its mean attention to position 0 exceeds this (Gu et al., 2025).")] = 0.3,
) -> None:
    """Attention the model produces on text: per head, Toeplitzness of the mean attention, offset profile, positional share.

    Runs the model over blocks of the corpus and, for every head of the chosen layers,
    reports the Toeplitzness of its mean attention (off-diagonal and full, each with a
    row-shuffle null), the offset k = j - i of the largest mean attention, the positional
    share (how much of each block's attention the offset profile alone explains) and the
    attention to position 0. Causal models are scored over j <= i only. Any architecture
    AutoModel loads, NoPE included. The model keeps its own fast attention: posviz computes
    the statistics in tiles from the queries and keys it forms (memory linear in the
    length; also the sink rate, the attention each position receives and the span holding
    50 %/90 % of each query's attention); where those cannot be captured, and with
    --exact-maps, it sums the eager attention maps.

    Example: posviz attention bert-base-uncased --seq-len 128 --layers all -o bert.json
    """
    from posviz.errors import OptionError
    from posviz.observe.attention import attention

    figures, texts = split_outputs(output)
    if device_map is not None and device_map != "auto":
        raise OptionError(f"--device-map {device_map!r} is not supported", "use --device-map auto")
    result = attention(model, corpus=corpus, seq_len=seq_len, layers=layers, batch_size=batch_size,
                       max_blocks=max_blocks or None, device=device.value, device_map=device_map,
                       tokenizer=tokenizer, show_progress=True, exact_maps=exact_maps, tile=tile, map_size=map_size,
                       sink_eps=sink_eps)
    rows = result.records(profiles=profiles)

    def table() -> str:
        from posviz.cli.tables import attention_table

        return attention_table(rows, conventions=result.conventions)

    def draw(path: Path) -> list[Path]:
        from posviz.plots.attention import plot_attention_layer
        from posviz.plots.common import save_figure

        targets = figure_paths(path, result.layers)
        for layer, target in targets:
            save_figure(plot_attention_layer(result, layer), target, dpi=dpi)
        return [target for _, target in targets]

    write_outputs(texts, figures, fmt.value, rows_renderer(rows, table), draw)
