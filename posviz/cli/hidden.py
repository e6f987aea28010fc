"""``posviz hidden``: where position lives inside a model, layer by layer (positional vectors, share, Toeplitzness, probe)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from posviz.cli.options import Device, OutputFormat, one_figure, rows_renderer, split_outputs, write_outputs


def command(
    model: Annotated[str, typer.Argument(help="Model folder, hub id, packaged model, RUN or RUN@STEP.", show_default=False)],
    corpus: Annotated[list[str] | None, typer.Option("--corpus", "-c", help="Text file, folder, the demo corpus or a dataset id; repeatable (default: the demo corpus).", show_default=False)] = None,
    seq_len: Annotated[int, typer.Option("--seq-len", "-n", min=2, help="Positions per block, special tokens included.")] = 128,
    layers: Annotated[str, typer.Option("--layers", help="'all' or a list like 0,2,5-7 (0 = the embedding output).")] = "all",
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="Blocks per forward pass.")] = 8,
    max_blocks: Annotated[int, typer.Option("--max-blocks", min=0, help="At most this many blocks of the corpus (0: all).")] = 256,
    device: Annotated[Device, typer.Option("--device", help="Where the model runs (ignored with --device-map).")] = Device.cpu,
    device_map: Annotated[str | None, typer.Option("--device-map", help="'auto': accelerate spreads a model too large for one device.")] = None,
    tokenizer: Annotated[str | None, typer.Option("--tokenizer", help="Tokenizer folder or id instead of the model's (or the run's).")] = None,
    probe_blocks: Annotated[int, typer.Option("--probe-blocks", min=2, help="Blocks sampled for the position probes (a quarter held out).")] = 64,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the probe sample, its split and the null draws.")] = 0,
    output: Annotated[list[Path] | None, typer.Option("--output", "-o", help="Figure (.png/.pdf/.svg) and/or records (.txt/.csv/.json); repeatable.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace existing outputs.")] = False,
    fmt: Annotated[OutputFormat, typer.Option("--format", "-f", help="Format of the records on stdout.")] = OutputFormat.table,
    dpi: Annotated[int, typer.Option("--dpi", min=30, max=1200, help="Resolution of PNG output.")] = 150,
) -> None:
    """Where position lives inside the network: per layer, positional vectors, their Toeplitzness, share, rank and a probe.

    Runs the model over blocks of the corpus and, for every layer (0 = the embedding
    output), takes the positional vectors V (mean hidden state at each position minus
    their mean), and reports: the positional share of the hidden-state variance with
    its null (positions shuffled within blocks), the Toeplitzness of P = V Vᵀ with its
    null (rows of V permuted), the rank holding 90 % of V's energy, and linear probes
    of position on held-out blocks (mean absolute error against always predicting the
    middle; which of two positions comes first). Positions holding a special token in
    every block ([CLS], [SEP], BOS) are left out. Any architecture AutoModel loads.

    Example: posviz hidden sentence-transformers/all-MiniLM-L6-v2 --corpus docs.txt --seq-len 128 -o minilm-hidden.png
    """
    from posviz.errors import OptionError
    from posviz.observe.hidden import hidden
    from posviz.train.corpus import DEMO_CORPUS

    figures, texts = split_outputs(output, force=force)
    if device_map is not None and device_map != "auto":
        raise OptionError(f"--device-map {device_map!r} is not supported", "use --device-map auto")
    result = hidden(model, corpus=corpus or [DEMO_CORPUS], seq_len=seq_len, layers=layers, batch_size=batch_size,
                    max_blocks=max_blocks or None, device=device.value, device_map=device_map, tokenizer=tokenizer,
                    probe_blocks=probe_blocks, seed=seed, show_progress=True)
    rows = result.records()

    def table() -> str:
        from posviz.cli.tables import hidden_table

        return hidden_table(rows, conventions=result.conventions)

    def figure():
        from posviz.plots.hidden import plot_hidden

        return plot_hidden(result)

    write_outputs(texts, figures, fmt.value, rows_renderer(rows, table), one_figure(figure, dpi))
