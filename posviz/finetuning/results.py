"""Fine-tuning results: one JSON document per (checkpoint, task), records of (source, task, seed, metric, value).

Layout. Results of a ``posviz train`` run live inside the run folder, so that they are
found again without recomputing and travel with the run; results of any other model
live under ``--out``::

    ROOT/finetune/step-STEP/TASK_SLUG.json     a run's checkpoint of step STEP
    ROOT/finetune/model/TASK_SLUG.json         any other model (ROOT is --out)

A document is ``{"source", "checkpoint", "step", "task", "metrics", "settings", "records"}``.
``records`` holds one record per seed and metric and one ``"median"`` record per metric::

    {"source": "runs/a", "checkpoint": "runs/a/checkpoint-1000", "step": 1000,
     "task": "builtin/bshift", "seed": 0, "metric": "accuracy", "value": 71.2}
    {..., "seed": "median", "metric": "accuracy", "value": 70.9, "min": 69.0, "max": 71.2, "n": 3}

Values are percentages (GLUE's habit: Matthews and Pearson/Spearman correlations
are × 100 too). Every task also reports ``score``: its GLUE task score, the mean of
its metrics (for one metric, that metric), which is what means over tasks average.
"""

from __future__ import annotations

import json
import re
import statistics
import warnings
from pathlib import Path
from typing import Any

#: Folder of the results inside a run folder or under ``--out``.
RESULTS_DIR = "finetune"
#: The task score every task reports (mean of its metrics).
SCORE = "score"

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def task_slug(task: str) -> str:
    """File-name-safe spelling of a task spec (``glue/sst2`` → ``glue-sst2``; local files keep their stem)."""
    kind, _, rest = task.partition(":")
    if rest:  # csv:PATH, jsonl:PATH: the file's stem and a short hash of the whole spec
        import hashlib

        digest = hashlib.sha256(task.encode()).hexdigest()[:8]
        return f"{kind}-{_UNSAFE.sub('-', Path(rest).stem).strip('-')}-{digest}"
    return _UNSAFE.sub("-", task).strip("-")


def results_path(root: str | Path, task: str, step: int | None) -> Path:
    """Where the document of one checkpoint (``step``; ``None`` for a non-run model) and task lives."""
    where = f"step-{step}" if step is not None else "model"
    return Path(root) / RESULTS_DIR / where / f"{task_slug(task)}.json"


def median_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One ``"median"`` record per (source, step, task, metric): median, min, max and count over seeds."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in records:
        if r.get("seed") != "median":
            groups.setdefault((r["source"], r.get("step"), r["task"], r["metric"]), []).append(r)
    out = []
    for members in groups.values():
        values = [float(m["value"]) for m in members]
        first = members[0]
        out.append({**{k: v for k, v in first.items() if k not in ("seed", "value")}, "seed": "median",
                    "value": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)})
    return out


def shown_medians(records: list[dict[str, Any]]) -> list[tuple[dict[str, Any], str]]:
    """The median records to show in a table, each with its metric label, by source (in the order given), step, task and metric.

    A task scored by one metric has a ``score`` equal to it (the mean of one value): the
    pair is shown once, labelled ``METRIC (= score)``. Other tasks show every metric, then
    ``score``.
    """
    medians = [r for r in records if r.get("seed") == "median"]
    sources = {s: i for i, s in enumerate(dict.fromkeys(str(r.get("source", "")) for r in medians))}  # as given
    medians.sort(key=lambda r: (sources[str(r.get("source", ""))], -1 if r.get("step") is None else int(r["step"]), r["task"],
                                r["metric"] == SCORE, r["metric"]))
    groups: dict[tuple[str, Any, str], list[dict[str, Any]]] = {}
    for r in medians:
        groups.setdefault((str(r.get("source", "")), r.get("step"), r["task"]), []).append(r)
    shown = []
    for group in groups.values():
        named = [r for r in group if r["metric"] != SCORE]
        same = len(named) == 1 and len(group) == 2 and all(group[0][k] == group[1][k] for k in ("value", "min", "max", "n"))
        shown += [(r, f"{r['metric']} (= {SCORE})") for r in named] if same else [(r, str(r["metric"])) for r in group]
    return shown


def write_document(path: str | Path, document: dict[str, Any]) -> None:
    """Write one results document atomically (its folder is created)."""
    from posviz.util.atomic import write_text_atomic

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(document, indent=2, allow_nan=False) + "\n")


def read_document(path: str | Path) -> dict[str, Any] | None:
    """One results document, or ``None`` (with a warning) when it is unreadable."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
        if not isinstance(doc, dict) or not isinstance(doc.get("records"), list):
            raise ValueError("no records")
        return doc
    except (OSError, ValueError) as e:
        warnings.warn(f"ignoring unreadable fine-tuning results {path}: {e}", stacklevel=2)
        return None


def load_results(root: str | Path) -> list[dict[str, Any]]:
    """Every record under ``ROOT/finetune`` (a run folder or an ``--out`` folder), sorted by step, task, seed.

    Returns an empty list when there are none.
    """
    folder = Path(root) / RESULTS_DIR
    records: list[dict[str, Any]] = []
    for path in sorted(folder.glob("*/*.json")) if folder.is_dir() else []:
        doc = read_document(path)
        if doc is not None:
            records += doc["records"]

    def key(r: dict[str, Any]) -> tuple:
        seed = r.get("seed")
        return (r.get("step") is None, r.get("step") or 0, r["task"], r["metric"], seed == "median", str(seed))

    return sorted(records, key=key)


def mean_score(records: list[dict[str, Any]]) -> dict[int | None, float]:
    """Per step: the mean over tasks of each task's median ``score`` (the y of Figure 2 for a run)."""
    per_step: dict[int | None, list[float]] = {}
    for r in records:
        if r.get("seed") == "median" and r["metric"] == SCORE:
            per_step.setdefault(r.get("step"), []).append(float(r["value"]))
    return {step: sum(v) / len(v) for step, v in per_step.items()}
