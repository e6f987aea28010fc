"""What a finished ``posviz train`` run reports: :class:`TrainResult` and its summary lines.

See ARCHITECTURE.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from posviz.train.options import TrainOptions

if TYPE_CHECKING:
    from posviz.train.data import RunData


@dataclass
class TrainResult:
    """What a finished run reports: paths, timing and the evaluation records.

    Attributes
    ----------
    options
        The run's options.
    checkpoint
        The final checkpoint folder.
    records
        One record per evaluation (:func:`posviz.train.log.evaluation_records`).
    seconds, steps_run
        Training time and optimizer steps of this invocation (after any resume).
    parameters, train_blocks, eval_blocks
        Model size; training and held-out blocks.
    resumed_from
        Checkpoint the run continued from, or ``None``.
    device
        Device and precision in words (``"cpu fp32"``).
    world_size, process_index
        Number of training processes (``torchrun``) and this one's rank (0: the main process).
    """

    options: TrainOptions
    checkpoint: Path
    records: list[dict[str, Any]]
    seconds: float
    steps_run: int
    parameters: int
    train_blocks: int
    eval_blocks: int
    resumed_from: Path | None = None
    device: str = "cpu"
    world_size: int = 1
    process_index: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def finished_run(options: TrainOptions, trainer: Any, data: RunData, *, checkpoint: Path | None, seconds: float,
                 parameters: int, device: str) -> TrainResult:
    """The :class:`TrainResult` of a run whose Trainer finished.

    Parameters
    ----------
    options, trainer, data
        The run's options, its Trainer after ``train()``, its data (:class:`~posviz.train.data.RunData`).
    checkpoint
        The checkpoint the run resumed from (``None``: from scratch).
    seconds, parameters, device
        Training time, model size, device and precision in words.
    """
    from posviz.read.manifests import checkpoint_step
    from posviz.train.log import evaluation_records

    step = trainer.state.global_step
    return TrainResult(
        options=options,
        checkpoint=options.out / f"checkpoint-{step}",
        records=evaluation_records(trainer.state.log_history),
        seconds=seconds,
        steps_run=step - (checkpoint_step(checkpoint) if checkpoint else 0),
        parameters=parameters,
        train_blocks=len(data.train_set),
        eval_blocks=len(data.eval_set),
        resumed_from=checkpoint,
        device=device,
        world_size=trainer.args.world_size,
        process_index=trainer.args.process_index,
    )


def summary_lines(result: TrainResult) -> list[str]:
    """The final summary, one line per fact."""
    o = result.options
    r = result.records
    first, last = (r[0], r[-1]) if r else ({}, {})

    def arrow(key: str, fmt: str = "{:.3f}") -> str:
        a, b = first.get(key), last.get(key)
        if a is None or b is None:
            return "—"
        return f"{fmt.format(a)} → {fmt.format(b)}"

    per_step = result.seconds / max(result.steps_run, 1)
    device = result.device if result.world_size == 1 else f"{result.world_size} processes, {result.device}, global batch {result.world_size * o.batch_size}"
    lines = [
        f"run         {o.out}  (scheme {o.scheme}" + (", causal LM" if o.objective == "causal" else "") + f", size {o.size}, {result.parameters / 1e6:.2f}M parameters, seq {o.seq_len}, seed {o.seed}"
        + (f", dropout {o.dropout:g}" if o.dropout else "") + f", {device})",
        f"training    {result.steps_run} steps in {result.seconds:.1f} s ({per_step:.3f} s/step)"
        + (f", resumed from {result.resumed_from.name}" if result.resumed_from else "")
        + f"; {result.train_blocks} training blocks" + (f" (--train-fraction {o.train_fraction:g})" if o.train_fraction < 1 else "")
        + f", {result.eval_blocks} held-out",
        f"eval        {'next-token ' if o.objective == 'causal' else ''}loss {arrow('eval_loss', '{:.3f}')}, "
        f"{'next' if o.objective == 'causal' else 'masked'}-token accuracy {arrow('eval_accuracy')}"
        + (f"  (steps {first.get('step')} → {last.get('step')})" if r else ""),
    ]
    if o.task is not None:  # a task run: the loss and accuracy are on the answer
        lines[-1] = (f"eval        task {o.task}, lengths up to {o.train_length}: answer loss {arrow('eval_loss')}, answer-token "
                     f"accuracy {arrow('eval_accuracy')}, exact match {arrow('eval_exact_match')}"
                     + (f"  (steps {first.get('step')} → {last.get('step')})" if r else ""))
    if last.get("toeplitzness_ep") is not None:  # the headline variant first (posviz.toeplitz.headline)
        lines.append(
            f"E_P         Toeplitzness (off-diagonal R²) {arrow('toeplitzness_ep_offdiag')}, null {arrow('null_ep_offdiag')}, "
            f"excess {arrow('excess_ep_offdiag')}; full R² {arrow('toeplitzness_ep')} (null {arrow('null_ep')})"
        )
    if last.get("toeplitzness_heads_mean") is not None:
        lines.append(f"heads       layer-0 positional scores, mean Toeplitzness (off-diagonal R²) {arrow('toeplitzness_heads_offdiag_mean')}; "
                     f"full R² {arrow('toeplitzness_heads_mean')}")
    lines += [
        f"checkpoint  {result.checkpoint}",
        f"log         {o.out / 'trajectory.csv'}, {o.out / 'trajectory.json'}",
    ]
    return lines
