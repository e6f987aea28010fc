"""Fine-tuning results of real ``posviz train`` runs, written in the documented layout.

``posviz finetune`` produces these documents; the tests of what consumes them (the
downstream panel of ``--plot-vs-glue``, the report's fine-tuning section) write them
with :func:`posviz.finetuning.results.write_document` into a copy of a shared run fixture,
with values chosen here, so that every plotted number has a hand computation. The
``fine_tuned`` fixture (tests/conftest.py) is :func:`fine_tuned_pair` of the shared runs.
"""

from __future__ import annotations

import shutil
import statistics
from pathlib import Path

from posviz.finetuning.results import SCORE, median_records, results_path, write_document

#: ``{step: {task: {metric: [value per fine-tuning seed]}}}`` of the absolute run (checkpoints 6 and 12).
ABSOLUTE = {
    6: {"builtin/bshift": {"accuracy": [55.0, 60.0, 58.0]}, "builtin/topic": {"accuracy": [70.0, 72.0, 71.0]}},
    12: {"builtin/bshift": {"accuracy": [61.0, 65.0, 63.0]}, "builtin/topic": {"accuracy": [74.0, 71.0, 75.0]},
         "glue/stsb": {"pearson": [20.0, 30.0], "spearman": [22.0, 26.0]}},  # only at step 12: left out of the mean
}
#: The tisa run: one checkpoint (12), two tasks, two seeds.
TISA = {12: {"builtin/bshift": {"accuracy": [52.0, 54.0]}, "builtin/topic": {"accuracy": [66.0, 68.0]}}}


def task_score(metrics: dict[str, list[float]]) -> list[float]:
    """Per seed, the task score: the mean of its metrics."""
    return [statistics.fmean(vals) for vals in zip(*metrics.values(), strict=True)]


def write_results(run: Path, results: dict[int, dict[str, dict[str, list[float]]]], source: str | None = None) -> None:
    """One document per (step, task), with per-seed records, ``score`` and the median records."""
    source = source or str(run)
    for step, tasks in results.items():
        for task, metrics in tasks.items():
            seeds = []
            for metric, values in {**metrics, SCORE: task_score(metrics)}.items():
                seeds += [{"source": source, "checkpoint": str(run / f"checkpoint-{step}"), "step": step, "task": task,
                           "seed": seed, "metric": metric, "value": v} for seed, v in enumerate(values)]
            doc = {"source": source, "checkpoint": str(run / f"checkpoint-{step}"), "step": step, "task": task,
                   "metrics": list(metrics), "settings": {"seeds": list(range(len(next(iter(metrics.values())))))}, "records": seeds + median_records(seeds)}
            write_document(results_path(run, task, step), doc)


def mean_of_medians(tasks: dict[str, dict[str, list[float]]], names: list[str]) -> float:
    """The hand computation of a point's y: the mean over ``names`` of each task's median score."""
    return statistics.fmean(statistics.median(task_score(tasks[t])) for t in names)


def fine_tuned_copy(run: Path, dest: Path, results: dict) -> Path:
    """A copy of a shared run fixture (those must not be modified) with fine-tuning results added."""
    shutil.copytree(run, dest)
    write_results(dest, results)
    return dest


def fine_tuned_pair(absolute_run: Path, tisa_run: Path, root: Path) -> tuple[Path, Path]:
    """Copies of the two shared run fixtures with fine-tuning results: absolute at steps 6 and 12, tisa at 12."""
    return fine_tuned_copy(absolute_run, root / "abs", ABSOLUTE), fine_tuned_copy(tisa_run, root / "tisa", TISA)
