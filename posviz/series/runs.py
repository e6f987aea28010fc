"""Trajectories: a model's path through (Toeplitzness, metric) space over training.

:func:`run_trajectory` reads a ``posviz train`` run's log into a :class:`RunPath`
(Toeplitzness against held-out accuracy or loss, one point per evaluation), which
:func:`posviz.plots.scatter.plot_toeplitzness_vs_metric` draws on a panel beside
the ALBERT comparison (``posviz toeplitzness --plot-vs-glue --run``) and the
report's ALBERT page draws beside its own. See ARCHITECTURE.md.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from posviz.errors import OptionError, PosvizError
from posviz.toeplitz.headline import HEADLINE_EXCLUDE_DIAGONAL, VARIANT_SHORT, field_suffix
from posviz.util.format import score

#: What a training run's trajectory can put on the y axis (``--run-metric``): axis labels.
RUN_METRICS: dict[str, str] = {
    "accuracy": "Held-out masked-token accuracy (%)",
    "loss": "Held-out MLM loss",
}

#: x label of the trajectory panel: which Toeplitzness a run contributes is said in its legend entry.
def run_toeplitzness_label(exclude_diagonal: bool = HEADLINE_EXCLUDE_DIAGONAL, *, heads: bool = True) -> str:
    """The x-axis label of run trajectories: which Toeplitzness, of what.

    ``heads``: some run is measured by its layer-0 heads (a scheme without E_P), which the label then explains.
    """
    label = f"Toeplitzness of P = E_P E_Pᵀ, {VARIANT_SHORT[exclude_diagonal]}"
    return label + "\n('mean head R²' in the legend: mean over the layer-0 heads)" if heads else label


@dataclass(frozen=True)
class Trajectory:
    """A model's path through (Toeplitzness, metric) space, e.g. over training steps.

    Attributes
    ----------
    label
        Legend text (e.g. ``"TISA S=3, seed 0"``).
    points
        ``(toeplitzness, metric)`` pairs in time order; at least one.
    """

    label: str
    points: Sequence[tuple[float, float]]


@dataclass(frozen=True)
class RunPath:
    """A training run's trajectory with what it was measured on.

    Attributes
    ----------
    trajectory
        The plotted path (legend label and ``(toeplitzness, metric)`` points).
    run
        The run folder.
    scheme
        The run's positional scheme.
    measure
        ``ep`` (Toeplitzness of P = E_P E_Pᵀ) or ``heads`` (mean over the
        layer-0 heads' positional scores, for schemes without a position table).
    metric
        A key of :data:`RUN_METRICS`.
    steps
        Training step of each point.
    exclude_diagonal
        Which R² the points are: off-diagonal (the headline) or full.
    """

    trajectory: Trajectory
    run: str
    scheme: str
    measure: str
    metric: str
    steps: tuple[int, ...]
    exclude_diagonal: bool = HEADLINE_EXCLUDE_DIAGONAL

    def records(self) -> list[dict[str, Any]]:
        """One output record per evaluation (kind ``run``)."""
        measure = ("toeplitzness_ep" + field_suffix(self.exclude_diagonal) if self.measure == "ep"
                   else "toeplitzness_heads" + field_suffix(self.exclude_diagonal) + "_mean")
        return [
            {"label": self.trajectory.label, "kind": "run", "model": self.run, "scheme": self.scheme, "step": step,
             "measure": measure, "toeplitzness": x, "metric": self.metric, "metric_value": y}
            for step, (x, y) in zip(self.steps, self.trajectory.points, strict=True)
        ]

    def summary_line(self) -> str:
        """The first and last evaluation in one line."""
        (x0, y0), (x1, y1) = self.trajectory.points[0], self.trajectory.points[-1]
        what = "Toeplitzness of E_P" if self.measure == "ep" else "mean layer-0 head Toeplitzness"
        what += f" ({VARIANT_SHORT[self.exclude_diagonal]})"
        unit = "%" if self.metric == "accuracy" else ""
        return (f"run {self.run} ({self.scheme}): {what} {score(x0)} → {score(x1)}, held-out {self.metric} "
                f"{score(y0, 2)}{unit} → {score(y1, 2)}{unit} (steps {self.steps[0]} → {self.steps[-1]}, {len(self.steps)} evaluations)")


def run_trajectory(
    run_dir: str | os.PathLike, *, metric: str = "accuracy", label: str | None = None,
    exclude_diagonal: bool = HEADLINE_EXCLUDE_DIAGONAL,
) -> RunPath:
    """A ``posviz train`` run's path through (Toeplitzness, held-out metric) space.

    Parameters
    ----------
    run_dir
        The ``--out`` folder of a ``posviz train`` run (read: ``trajectory.json``).
    metric
        ``accuracy`` (held-out masked-token accuracy, in %) or ``loss`` (held-out
        MLM loss).
    label
        Name of the run in the legend (default: the folder as given).
    exclude_diagonal
        Plot the off-diagonal R² (default: posviz's headline variant) or the full R².

    Returns
    -------
    RunPath
        The trajectory, one point per evaluation. Its Toeplitzness is that of
        P = E_P E_Pᵀ when the scheme has a position table (absolute,
        absolute+tisa, TUPE), else the mean over the layer-0 heads' positional
        scores; the legend label says which (``mean head R²``).

    Raises
    ------
    PosvizError
        Not a run folder, or no evaluation with a Toeplitzness (scheme ``none``).
    """
    from posviz.train.log import load_run_log, load_trajectory

    if metric not in RUN_METRICS:
        raise OptionError(f"unknown run metric {metric!r}", f"choose one of: {', '.join(RUN_METRICS)}")
    name = label or os.fspath(run_dir).rstrip("/\\") or os.fspath(run_dir)
    if not os.path.isdir(run_dir):
        raise PosvizError(f"{name}: no such run folder", "pass the --out folder of a `posviz train` run")
    doc = load_run_log(run_dir)
    scheme = str(doc.get("run", {}).get("scheme", "?"))
    measure = "ep" if any(r.get("toeplitzness_ep") is not None for r in doc["evaluations"]) else "heads"
    steps, points = [], []
    for p in load_trajectory(run_dir, measure=measure, exclude_diagonal=exclude_diagonal):
        y = p.eval_accuracy * 100 if metric == "accuracy" else p.eval_loss
        if math.isfinite(p.toeplitzness) and math.isfinite(y):
            steps.append(p.step)
            points.append((p.toeplitzness, y))
    if not points:
        if exclude_diagonal and any(r.get("toeplitzness_ep", r.get("toeplitzness_heads_mean")) is not None for r in doc["evaluations"]):
            raise PosvizError(f"{name}: its log has no off-diagonal Toeplitzness (written by an older posviz)",
                              "pass --full to plot the full R² it has")
        raise PosvizError(f"{name}: no evaluation with a Toeplitzness and a held-out {metric} to plot (scheme {scheme})",
                          "scheme 'none' has no positional scores")
    text = f"{name} ({scheme}" + ("; mean head R²)" if measure == "heads" else ")")
    return RunPath(Trajectory(text, points), name, scheme, measure, metric, tuple(steps), exclude_diagonal)
