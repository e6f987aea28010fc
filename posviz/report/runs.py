"""Training runs as report inputs: a ``posviz train`` run folder becomes a :class:`ReportItem`.

A folder is a run when it holds the run's training log (``trajectory.json``,
:mod:`posviz.train.log`). Its item carries the log (:class:`RunInfo`, for the
training section and the ALBERT figure's trajectory panel) and, when the scheme
has a position table (``absolute``, ``absolute+tisa``, ``tupe-a``, ``tupe-r``, ``sinusoidal``), the
table and score of its final checkpoint, so that the summary table and the
heatmaps show the trained P like any model's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posviz.errors import PosvizError
from posviz.report.context import ReportItem, ReportOptions
from posviz.report.models import load_model


@dataclass(frozen=True)
class RunInfo:
    """What the report knows about one training run.

    Attributes
    ----------
    path
        The run folder as given.
    scheme, size
        Positional scheme and model size of the run.
    steps
        Step of the last evaluation (the run's length so far).
    planned_steps
        ``--steps`` of the run (larger than ``steps`` for a run still going or stopped early).
    checkpoint
        The final complete checkpoint (``None`` if none is left).
    evaluations
        The log's records, one per evaluation, by step (:mod:`posviz.train.log`).
    options
        The run's options (``run.json``, as recorded in the log).
    """

    path: str
    scheme: str
    size: str
    steps: int
    planned_steps: int | None
    checkpoint: Path | None
    evaluations: list[dict[str, Any]] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        """``scheme absolute, 500 steps`` (``200 of 500 steps`` for an unfinished run)."""
        planned = self.planned_steps
        steps = f"{self.steps} of {planned} steps" if planned and planned != self.steps else f"{self.steps} steps"
        return f"scheme {self.scheme}, {steps}"


def is_run_folder(spec: str | os.PathLike) -> bool:
    """True when ``spec`` is a folder with a ``posviz train`` log."""
    from posviz.read.runs import LOG_JSON

    return os.path.isfile(os.path.join(os.fspath(spec), LOG_JSON))


def final_checkpoint(run_dir: str | os.PathLike) -> Path | None:
    """The newest ``checkpoint-N`` whose manifest verifies (as ``posviz heatmap RUN`` reads it), else ``None``."""
    from posviz.errors import SourceError
    from posviz.read.runs import run_checkpoint

    try:
        return run_checkpoint(run_dir).folder
    except SourceError:  # no complete checkpoint: the report says so on the run's pages
        return None


def load_run(spec: str, options: ReportOptions) -> ReportItem | None:
    """Read a run folder for the report (``None`` if ``spec`` is not one).

    Parameters
    ----------
    spec
        The run's ``--out`` folder.
    options
        Report settings (positions, normalisation, null baseline of the final
        checkpoint's score).

    Returns
    -------
    ReportItem or None
        ``kind="run"`` with ``data["run"]`` a :class:`RunInfo` and ``data["finetune"]`` its
        fine-tuning records (:func:`posviz.finetuning.results.load_results`; empty if none); ``embeddings`` and
        ``score`` of the final checkpoint when the scheme has a position table,
        otherwise a ``note`` saying why there is no P.

    Raises
    ------
    PosvizError
        A run folder whose log is unreadable or has no evaluation yet.
    """
    from posviz.finetuning.results import load_results
    from posviz.read.runs import LOG_JSON, RUN_FILE
    from posviz.train.log import load_run_log

    if not is_run_folder(spec):
        if os.path.isfile(os.path.join(spec, RUN_FILE)):
            raise PosvizError(f"{spec}: a posviz train run without a training log yet (no {LOG_JSON})",
                              "wait for its first evaluation, or pass one of its checkpoint-N folders")
        return None
    doc = load_run_log(spec)
    evaluations = sorted(doc["evaluations"], key=lambda r: int(r["step"]))
    if not evaluations:
        raise PosvizError(f"{spec}: the training log has no evaluation yet", "wait for the run's first evaluation")
    recorded = doc.get("run") or {}
    label = spec.rstrip("/\\") or spec
    checkpoint = final_checkpoint(spec)
    info = RunInfo(
        path=label,
        scheme=str(recorded.get("scheme", "?")),
        size=str(recorded.get("size", "?")),
        steps=int(evaluations[-1]["step"]),
        planned_steps=recorded.get("steps"),
        checkpoint=checkpoint,
        evaluations=evaluations,
        options=dict(recorded),
    )
    source = f"posviz train run {label}"
    if checkpoint is None:
        item = ReportItem(spec, label, source, kind="run", family="posviz-albert",
                          note="no complete checkpoint is left in the run folder")
    else:
        item = load_model(str(checkpoint), options)  # the trained table and its score, or why there is none
        item.spec, item.label, item.kind, item.source = spec, label, "run", source
    item.data["run"] = info
    item.data["finetune"] = load_results(spec)  # posviz finetune's records of its checkpoints, if any
    return item
