"""``posviz extrapolate``: held-out loss and attention statistics within and beyond the trained length, with RoPE-scaling variants."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from posviz.cli.options import Device, OutputFormat, one_figure, rows_renderer, split_outputs, write_outputs


def command(
    models: Annotated[list[str], typer.Argument(help="Model folders, hub ids, packaged models, RUN or RUN@STEP.", show_default=False)],
    lengths: Annotated[str, typer.Option("--lengths", "-n", help="Window lengths (positions, special tokens included), e.g. 64,128,256,512,1024.")] = "64,128,256,512,1024",
    corpus: Annotated[list[str] | None, typer.Option("--corpus", "-c", help="Text file, folder, the demo corpus or a dataset id; repeatable (default: the demo corpus).", show_default=False)] = None,
    rope_scaling: Annotated[list[str] | None, typer.Option("--rope-scaling", metavar="TYPE:FACTOR", help="A RoPE-scaling variant evaluated beside the unscaled model: linear, dynamic, yarn or llama3, e.g. yarn:4 (repeatable; RoPE models only).", show_default=False)] = None,
    extend_table: Annotated[bool, typer.Option("--extend-table", help="For a learned position table shorter than the longest length, also evaluate the table linearly interpolated to that length (variant interpolated:N).")] = False,
    stride: Annotated[int | None, typer.Option("--stride", min=1, help="Sliding-window evaluation: each window scores only its last S text tokens (the first: all). Default: non-overlapping blocks.", show_default=False)] = None,
    layers: Annotated[str, typer.Option("--layers", help="'all' or a list like 0,2,5-7: layers whose heads are measured.")] = "all",
    max_blocks: Annotated[int, typer.Option("--max-blocks", min=0, help="Blocks of the longest length that make the text budget, the same text at every length (0: the whole corpus).")] = 8,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="Windows per forward pass.")] = 4,
    mask_rate: Annotated[float, typer.Option("--mask-rate", help="Masked LMs: share of the text tokens masked and scored.")] = 0.15,
    seed: Annotated[int, typer.Option("--seed", help="Masked LMs: seed of the masked positions.")] = 0,
    device: Annotated[Device, typer.Option("--device", help="Where the model runs (ignored with --device-map).")] = Device.cpu,
    device_map: Annotated[str | None, typer.Option("--device-map", help="'auto': accelerate spreads a model too large for one device.")] = None,
    tokenizer: Annotated[str | None, typer.Option("--tokenizer", help="Tokenizer folder or id instead of the model's (or the run's).")] = None,
    output: Annotated[list[Path] | None, typer.Option("--output", "-o", help="Figure (.png/.pdf/.svg) and/or records (.txt/.csv/.json); repeatable.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace existing outputs.")] = False,
    fmt: Annotated[OutputFormat, typer.Option("--format", "-f", help="Format of the records on stdout.")] = OutputFormat.table,
    dpi: Annotated[int, typer.Option("--dpi", min=30, max=1200, help="Resolution of PNG output.")] = 150,
    task: Annotated[str | None, typer.Option("--task", help="Evaluate runs of posviz train --task on their task: --lengths are then the task's own (items, digits, actions), and the records give exact match (accuracy), token accuracy and loss per length.", show_default=False)] = None,
    examples: Annotated[int, typer.Option("--examples", min=1, help="--task: test examples per length (drawn with seed 0, hashed).")] = 100,
    exact_maps: Annotated[bool, typer.Option("--exact-maps", help="Sum eager attention maps (memory grows with n²) instead of computing the statistics in tiles while the model keeps its fast attention.")] = False,
) -> None:
    """Beyond the trained length: held-out loss and per-head attention entropy, sink and positional share at each length.

    Cuts the same text (the first tokens of the corpus, enough for --max-blocks
    blocks of the longest length) into windows of each length and reports, per
    model and length, the held-out loss and perplexity (causal: next-token NLL;
    masked LM: a seeded 15 % masking) and, per head, the attention entropy (raw and
    normalised by log of the keys seen), the largest weight, the sink mass on the
    first token, and the positional share and off-diagonal Toeplitzness of the mean
    attention. A length beyond a learned position table is reported as n/a with the
    reason. --rope-scaling adds variants of the same checkpoint under transformers'
    own RoPE scaling; --extend-table adds a learned table interpolated to the longest
    length (position interpolation: every position is compressed). JSON: a list of records (model, variant, length, loss, reason,
    heads: [{layer, head, entropy, sink_mass, ...}], ...).

    With --task, the models are runs of `posviz train --task` and each length is the
    task's own: records (model, length, accuracy = exact match under greedy decoding,
    token_accuracy, loss, heads) on the same seeded test examples for every model.

    Example: posviz extrapolate gpt2 --corpus docs.txt --lengths 256,512,1024,2048 -o gpt2-extrapolate.png
    Example: posviz extrapolate runs/copy-none-tiny-s0 --task copy --lengths 10,20,30,40 --format json
    """
    from posviz.errors import OptionError
    from posviz.extrapolation.extrapolate import extrapolate
    from posviz.train.corpus import DEMO_CORPUS

    figures, texts = split_outputs(output, force=force)
    if device_map is not None and device_map != "auto":
        raise OptionError(f"--device-map {device_map!r} is not supported", "use --device-map auto")
    if task is not None and (corpus or max_blocks != 8 or mask_rate != 0.15 or seed != 0 or device_map is not None):
        raise OptionError("--corpus, --max-blocks, --mask-rate, --seed and --device-map do not apply with --task",
                          "a task makes its own test examples (--examples)")
    result = extrapolate(models, task=task, examples=examples, corpus=corpus or [DEMO_CORPUS], lengths=lengths, rope_scaling=rope_scaling or [],
                         extend_table=extend_table, stride=stride, layers=layers, batch_size=batch_size, max_blocks=max_blocks or None,
                         mask_rate=mask_rate, seed=seed, device=device.value, device_map=device_map, tokenizer=tokenizer,
                         show_progress=True, exact_maps=exact_maps)

    def table() -> str:
        from posviz.cli.tables import extrapolate_table, task_table

        return task_table(result) if task is not None else extrapolate_table(result)

    def figure():
        from posviz.plots.extrapolate import plot_extrapolation
        from posviz.plots.tasks import plot_task_extrapolation

        return plot_task_extrapolation(result) if task is not None else plot_extrapolation(result)

    render = rows_renderer(result.records(), table, csv_rows=result.flat_records())
    write_outputs(texts, figures, fmt.value, render, one_figure(figure, dpi))
