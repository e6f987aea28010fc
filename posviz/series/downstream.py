"""A fine-tuned run on Figure 2's axes: Toeplitzness of a checkpoint against its downstream score.

:func:`run_downstream` reads a ``posviz train`` run's fine-tuning results
(:mod:`posviz.finetuning.results`) into a :class:`DownstreamPath`: one point per
fine-tuned checkpoint, in step order. x is the headline Toeplitzness of that
checkpoint, the same definition as the ALBERT panel's x (R² of P = E_P E_Pᵀ; for
schemes without a position table the mean over the layer-0 heads' positional
scores), taken from the run's log at that step when it was logged there and
otherwise computed from the checkpoint by the code that logs it. y is the mean over
the run's fine-tuned tasks of each task's median score over fine-tuning seeds.

That y is *not* ALBERT's y (the README's average of SQuAD, MNLI, SST-2 and RACE):
the two go on separate panels, each with its own axis label
(:func:`posviz.plots.scatter.plot_toeplitzness_vs_metric`).
"""

from __future__ import annotations

import os
import statistics
import warnings
from dataclasses import dataclass
from typing import Any

from posviz.errors import PosvizError
from posviz.finetuning.results import SCORE, load_results
from posviz.series.runs import Trajectory
from posviz.toeplitz.headline import HEADLINE_EXCLUDE_DIAGONAL, VARIANT_SHORT, field_suffix
from posviz.util.format import score

#: y label of the downstream panel.
DOWNSTREAM_YLABEL = "Mean downstream score over the run's fine-tuned tasks (%)\n(median over fine-tuning seeds per task)"


@dataclass(frozen=True)
class DownstreamPath:
    """A fine-tuned run's checkpoints as points (Toeplitzness, mean downstream score), in step order.

    Attributes
    ----------
    trajectory
        The plotted path (legend label and ``(toeplitzness, score)`` points).
    run
        The run folder, as named in outputs.
    scheme
        The run's positional scheme.
    measure
        ``ep`` (Toeplitzness of P = E_P E_Pᵀ) or ``heads`` (mean over the layer-0
        heads' positional scores).
    steps
        Pre-training step of each point (the fine-tuned checkpoint).
    tasks
        The tasks every point averages (those fine-tuned at every step).
    x_from
        Per point: ``log`` (the run's log at that step) or ``checkpoint`` (computed).
    n_seeds
        Per point: the fewest fine-tuning seeds behind any of its task medians.
    left_out
        Tasks fine-tuned at some steps only, left out so that every point averages the same tasks.
    exclude_diagonal
        Which R² x is: off-diagonal (the headline) or full.
    """

    trajectory: Trajectory
    run: str
    scheme: str
    measure: str
    steps: tuple[int, ...]
    tasks: tuple[str, ...]
    x_from: tuple[str, ...]
    n_seeds: tuple[int, ...]
    left_out: tuple[str, ...] = ()
    exclude_diagonal: bool = HEADLINE_EXCLUDE_DIAGONAL

    @property
    def field(self) -> str:
        """The log field x comes from (``toeplitzness_ep_offdiag``, ``toeplitzness_heads_offdiag_mean``, ...)."""
        sfx = field_suffix(self.exclude_diagonal)
        return "toeplitzness_ep" + sfx if self.measure == "ep" else "toeplitzness_heads" + sfx + "_mean"

    def records(self) -> list[dict[str, Any]]:
        """One output record per fine-tuned checkpoint (kind ``run-downstream``)."""
        return [
            {"label": self.trajectory.label, "kind": "run-downstream", "model": self.run, "scheme": self.scheme, "step": step,
             "measure": self.field, "toeplitzness": x, "toeplitzness_from": src, "metric": "downstream_mean_score",
             "metric_value": y, "tasks": list(self.tasks), "fine_tuning_seeds": n}
            for step, (x, y), src, n in zip(self.steps, self.trajectory.points, self.x_from, self.n_seeds, strict=True)
        ]

    def summary_line(self) -> str:
        """The first and last fine-tuned checkpoint in one line."""
        (x0, y0), (x1, y1) = self.trajectory.points[0], self.trajectory.points[-1]
        what = "Toeplitzness of E_P" if self.measure == "ep" else "mean layer-0 head Toeplitzness"
        what += f" ({VARIANT_SHORT[self.exclude_diagonal]})"
        where = (f"steps {self.steps[0]} → {self.steps[-1]}, {len(self.steps)} checkpoints" if len(self.steps) > 1
                 else f"step {self.steps[0]}")
        return (f"run {self.run} ({self.scheme}), fine-tuned: {what} {score(x0)} → {score(x1)}, mean downstream score "
                f"{score(y0, 2)} → {score(y1, 2)} over {len(self.tasks)} task{'s' if len(self.tasks) != 1 else ''} "
                f"({', '.join(self.tasks)}; {where})")


def checkpoint_toeplitzness(run_dir: str | os.PathLike, step: int) -> dict[str, Any]:
    """The Toeplitzness fields the training log records, computed from the run's checkpoint of ``step``.

    The same function the training callback calls (:func:`posviz.train.callbacks.measure_positions`,
    all ``max_position_embeddings`` positions), on the saved model.

    Raises
    ------
    SourceError
        No complete checkpoint of that step is kept.
    """
    from posviz.models import PosvizForMaskedLM
    from posviz.read.runs import run_checkpoint
    from posviz.train.callbacks import measure_positions

    folder = run_checkpoint(run_dir, str(step)).folder
    model = PosvizForMaskedLM.from_pretrained(folder).eval()
    return measure_positions(model, n=model.config.max_position_embeddings)


def run_downstream(
    run_dir: str | os.PathLike, *, label: str | None = None, exclude_diagonal: bool = HEADLINE_EXCLUDE_DIAGONAL,
) -> DownstreamPath | None:
    """A run's fine-tuned checkpoints as points on Figure 2's downstream panel.

    Parameters
    ----------
    run_dir
        A ``posviz train`` run folder.
    label
        Name of the run in outputs (default: the folder as given).
    exclude_diagonal
        x is the off-diagonal R² (default, the headline) or the full R².

    Returns
    -------
    DownstreamPath or None
        ``None`` when the run has no fine-tuning results (it stays on the masked-LM panel).

    Raises
    ------
    PosvizError
        Scheme ``none`` (no positional scores), or no fine-tuned checkpoint whose
        Toeplitzness is logged or can be computed.
    """
    from posviz.finetuning.tables import seed_values
    from posviz.train.log import load_run_log

    name = label or os.fspath(run_dir).rstrip("/\\") or os.fspath(run_dir)
    per_step: dict[int, dict[str, list[float]]] = {}  # one run folder: its sources are spellings of the same run
    for steps in seed_values(load_results(run_dir), metric=SCORE).values():
        for step, values in steps.items():
            for task, vals in values.items():
                per_step.setdefault(step, {}).setdefault(task, []).extend(vals)
    if not per_step:
        return None
    doc = load_run_log(run_dir)
    scheme = str(doc.get("run", {}).get("scheme", "?"))
    if scheme == "none":
        raise PosvizError(f"{name}: scheme 'none' has no positional scores, so its fine-tuned checkpoints have no Toeplitzness to plot")
    measure = "ep" if any(r.get("toeplitzness_ep") is not None for r in doc["evaluations"]) else "heads"
    sfx = field_suffix(exclude_diagonal)
    key = "toeplitzness_ep" + sfx if measure == "ep" else "toeplitzness_heads" + sfx + "_mean"
    logged = {int(r["step"]): r.get(key) for r in doc["evaluations"]}
    tasks = sorted(set.intersection(*(set(t) for t in per_step.values())))
    left_out = sorted({t for v in per_step.values() for t in v} - set(tasks))
    if not tasks:
        raise PosvizError(f"{name}: no task was fine-tuned at every fine-tuned checkpoint", "fine-tune each checkpoint on the same tasks")
    steps, points, sources, seeds = [], [], [], []
    for step in sorted(per_step):
        x, src = logged.get(step), "log"
        if x is None:
            x, src = _computed(run_dir, step, key, name), "checkpoint"
        if x is None:
            continue
        steps.append(step)
        points.append((float(x), statistics.fmean(statistics.median(per_step[step][t]) for t in tasks)))
        sources.append(src)
        seeds.append(min(len(per_step[step][t]) for t in tasks))
    if not points:
        raise PosvizError(f"{name}: none of its fine-tuned checkpoints has a Toeplitzness logged or a checkpoint left to compute it from")
    text = f"{name} ({scheme}" + ("; mean head R²" if measure == "heads" else "") + f"; {len(tasks)} task{'s' if len(tasks) != 1 else ''})"
    return DownstreamPath(Trajectory(text, points), name, scheme, measure, tuple(steps), tuple(tasks), tuple(sources),
                          tuple(seeds), tuple(left_out), exclude_diagonal)


def _computed(run_dir, step: int, key: str, name: str) -> float | None:
    """x computed from the checkpoint of ``step``; ``None`` (with a warning) when it is not kept."""
    from posviz.errors import SourceError

    try:
        value = checkpoint_toeplitzness(run_dir, step).get(key)
    except SourceError as e:
        warnings.warn(f"{name}: fine-tuned at step {step}, whose Toeplitzness is neither logged nor computable ({e.message}); "
                      "left out of the figure", stacklevel=3)
        return None
    return value
