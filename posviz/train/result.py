"""What a finished ``posviz train`` run reports: :class:`TrainResult` and its summary lines.

See ARCHITECTURE.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posviz.train.options import TrainOptions


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
    extra: dict[str, Any] = field(default_factory=dict)


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
    lines = [
        f"run         {o.out}  (scheme {o.scheme}, size {o.size}, {result.parameters / 1e6:.2f}M parameters, seq {o.seq_len}, seed {o.seed}, {result.device})",
        f"training    {result.steps_run} steps in {result.seconds:.1f} s ({per_step:.3f} s/step)"
        + (f", resumed from {result.resumed_from.name}" if result.resumed_from else "")
        + f"; {result.train_blocks} training blocks, {result.eval_blocks} held-out",
        f"eval        loss {arrow('eval_loss', '{:.3f}')}, masked-token accuracy {arrow('eval_accuracy')}"
        + (f"  (steps {first.get('step')} → {last.get('step')})" if r else ""),
    ]
    if last.get("toeplitzness_ep") is not None:
        lines.append(
            f"E_P         Toeplitzness {arrow('toeplitzness_ep')} (null {last.get('null_ep', float('nan')):.3f}, excess {arrow('excess_ep')})"
        )
    if last.get("toeplitzness_heads_mean") is not None:
        lines.append(f"heads       layer-0 positional scores, mean Toeplitzness {arrow('toeplitzness_heads_mean')}")
    lines += [
        f"checkpoint  {result.checkpoint}",
        f"log         {o.out / 'trajectory.csv'}, {o.out / 'trajectory.json'}",
    ]
    return lines
