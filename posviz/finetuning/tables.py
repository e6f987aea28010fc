"""Fine-tuning results of several configurations side by side: TISA's Table 3 and score against pre-training step.

A *configuration* is one way of pre-training (``absolute``, ``absolute+tisa`` with
S = 3 kernels, ``tupe-a``, ...), run with several pre-training seeds; each run is
fine-tuned with several fine-tuning seeds (records of :mod:`posviz.finetuning.results`,
told apart by their ``source``). Values are percentages, higher is better.

:func:`table3` lays the runs out as Table 3 of Wennberg & Henter (2021): one row per
task and *arm* (a baseline and its TISA variants, e.g. arm ``a`` = absolute against
absolute+TISA at S = 1, 3, 5), with each cell's median and its spread over
pre-training seeds, the best variant's difference from the baseline ``|Δ|`` and the
relative error reduction ``Δ%``. :func:`table3_markdown` renders it for a README.
:func:`score_by_step` gives the downstream score along pre-training per
configuration (TUPE's "faster pre-training"). Pure Python: no numpy, no torch.

**How a cell aggregates seeds** (``aggregate="nested"``, the default): each run's
value is the median over its fine-tuning seeds (the paper's statistic: it discards
the occasional failed fine-tuning run), and the cell is the median over the
configuration's runs of those values, with their min–max as the spread. The run,
not the fine-tuning seed, is the unit of replication of a claim about a
pre-training configuration, so every pre-trained model weighs the same however
many fine-tuning seeds it has, and the spread shows how much pre-training seeds
disagree. ``aggregate="pooled"`` takes the median and min–max over all
(pre-training seed × fine-tuning seed) values instead.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from posviz.finetuning.results import SCORE

#: Column labels of an arm: the baseline, then TISA with S = 1, 3 and 5 kernels.
TABLE3_COLUMNS: tuple[str, ...] = ("baseline", "S=1", "S=3", "S=5")
#: Task name of the row that averages the tasks' scores.
AVERAGE = "average"
AGGREGATES = ("nested", "pooled")


def load_configs(runs_by_config: Mapping[str, Sequence[str | os.PathLike]]) -> dict[str, list[dict[str, Any]]]:
    """``{configuration: records}`` read from run folders: ``{config: [run folder, ...]}`` (one folder per pre-training seed).

    A folder without results contributes nothing (its configuration's cells then have fewer runs, as ``n`` says).
    """
    from posviz.finetuning.results import load_results

    return {config: [r for run in runs for r in load_results(run)] for config, runs in runs_by_config.items()}


def seed_values(records: Iterable[dict[str, Any]], *, metric: str = SCORE) -> dict[str, dict[int, dict[str, list[float]]]]:
    """``{source: {step: {task: [value per fine-tuning seed]}}}`` of one metric.

    Where a (source, step, task) has no per-seed record but a ``"median"`` record,
    that median stands for it (one value).
    """
    seeds: dict[str, dict[int, dict[str, list[float]]]] = {}
    medians: dict[tuple, float] = {}
    for r in records:
        if r.get("metric") != metric or r.get("step") is None:
            continue
        key = (str(r["source"]), int(r["step"]), str(r["task"]))
        if r.get("seed") == "median":
            medians[key] = float(r["value"])
        else:
            seeds.setdefault(key[0], {}).setdefault(key[1], {}).setdefault(key[2], []).append(float(r["value"]))
    for (source, step, task), value in medians.items():
        seeds.setdefault(source, {}).setdefault(step, {}).setdefault(task, [value])
    return seeds


def _last_step(per_step: Mapping[int, Any], step: int | str) -> int | None:
    """The step a run contributes: its newest fine-tuned checkpoint (``"last"``) or ``step`` if it has it."""
    if step == "last":
        return max(per_step) if per_step else None
    return int(step) if int(step) in per_step else None


def _runs(records: Iterable[dict[str, Any]], metric: str, step: int | str) -> dict[str, dict[str, list[float]]]:
    """``{source: {task: [value per fine-tuning seed]}}`` at the chosen step of each run."""
    out = {}
    for source, per_step in seed_values(records, metric=metric).items():
        chosen = _last_step(per_step, step)
        if chosen is not None:
            out[source] = per_step[chosen]
    return out


def _cell(runs: Mapping[str, Mapping[str, list[float]]], task: str, aggregate: str, average_over: Sequence[str]) -> dict[str, Any] | None:
    """Median, min, max and counts of one task (or the average over ``average_over``) over a configuration's runs."""
    if task == AVERAGE:
        per_run = [statistics.fmean(statistics.median(v[t]) for t in average_over) for v in runs.values()
                   if average_over and all(t in v for t in average_over)]
        pooled = per_run  # a run's average has no per-seed values: fine-tuning seeds need not align across tasks
    else:
        per_run = [statistics.median(v[task]) for v in runs.values() if task in v]
        pooled = [x for v in runs.values() if task in v for x in v[task]]
    if not per_run:
        return None
    values = per_run if aggregate == "nested" else pooled
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(per_run)}


def _common_tasks(runs_by_config: Mapping[str, Mapping[str, Mapping[str, list[float]]]]) -> list[str]:
    """Tasks that every run of every configuration has: what the average row averages."""
    sets = [set(tasks) for runs in runs_by_config.values() for tasks in runs.values()]
    return sorted(set.intersection(*sets)) if sets else []


def table3(
    records_by_config: Mapping[str, Iterable[dict[str, Any]]],
    arms: Mapping[str, Sequence[str]],
    *,
    columns: Sequence[str] = TABLE3_COLUMNS,
    metric: str = SCORE,
    step: int | str = "last",
    tasks: Sequence[str] | None = None,
    aggregate: str = "nested",
) -> list[dict[str, Any]]:
    """TISA's Table 3 from fine-tuning records: one row per (task, arm), the average row last.

    Parameters
    ----------
    records_by_config
        ``{configuration: records}``; the records of all runs (pre-training seeds) of
        one configuration, told apart by ``source`` (e.g. ``load_results`` of each run
        folder, concatenated).
    arms
        ``{arm: [baseline configuration, variant, ...]}``, e.g.
        ``{"a": ["absolute", "abs-tisa-s1", "abs-tisa-s3", "abs-tisa-s5"], "b": [...]}``.
        A configuration missing from ``records_by_config`` leaves its cells empty.
    columns
        Labels of the arm's positions (default ``baseline, S=1, S=3, S=5``); as many
        as each arm has configurations.
    metric
        The metric tabulated (default each task's ``score``).
    step
        ``"last"``: each run's newest fine-tuned checkpoint; or one pre-training step.
    tasks
        Rows, in order (default every task found, sorted).
    aggregate
        ``nested`` (median over runs of each run's median over fine-tuning seeds) or
        ``pooled`` (median over all values); see the module docstring.

    Returns
    -------
    list of dict
        CSV-ready rows: ``task``, ``arm``, ``metric``, ``aggregate``; per column label
        ``L``: ``L`` (median, ``None`` if missing), ``L min``, ``L max``, ``L n`` (runs)
        and ``L config``; then ``best`` (label of the best variant), ``delta`` (best
        variant minus baseline), ``abs_delta`` (the paper's ``|Δ|``), ``delta_pct``
        (relative error reduction ``100 Δ / (100 − baseline)``, the paper's ``Δ%``;
        negative when the best variant is worse) and ``tasks`` (what a row averages).

    Raises
    ------
    ValueError
        Unknown ``aggregate``, or an arm whose length differs from ``columns``.
    """
    if aggregate not in AGGREGATES:
        raise ValueError(f"aggregate must be one of {AGGREGATES}, not {aggregate!r}")
    for arm, configs in arms.items():
        if len(configs) != len(columns):
            raise ValueError(f"arm {arm!r} has {len(configs)} configurations for {len(columns)} columns {tuple(columns)}")
    wanted = {c for configs in arms.values() for c in configs}
    runs = {c: _runs(records_by_config[c], metric, step) for c in wanted if c in records_by_config}
    runs = {c: r for c, r in runs.items() if r}
    found = sorted({t for r in runs.values() for tasks_ in r.values() for t in tasks_})
    average_over = {arm: _common_tasks({c: runs[c] for c in configs if c in runs}) for arm, configs in arms.items()}
    rows = []
    for task in [*(tasks if tasks is not None else found), AVERAGE]:
        for arm, configs in arms.items():
            cells = [_cell(runs[c], task, aggregate, average_over[arm]) if c in runs else None for c in configs]
            if all(c is None for c in cells):
                continue
            rows.append(_row(task, arm, configs, columns, cells, metric, aggregate, average_over[arm] if task == AVERAGE else [task]))
    return rows


def _row(task, arm, configs, columns, cells, metric, aggregate, tasks) -> dict[str, Any]:
    """One (task, arm) row: the cells, then the best variant's difference from the baseline."""
    row: dict[str, Any] = {"task": task, "arm": arm, "metric": metric, "aggregate": aggregate}
    for label, config, cell in zip(columns, configs, cells, strict=True):
        row[label] = cell["median"] if cell else None
        row[f"{label} min"] = cell["min"] if cell else None
        row[f"{label} max"] = cell["max"] if cell else None
        row[f"{label} n"] = cell["n"] if cell else 0
        row[f"{label} config"] = config
    base = row[columns[0]]
    variants = [(row[label], label) for label in columns[1:] if row[label] is not None]
    best, best_label = max(variants, key=lambda v: v[0]) if variants else (None, None)
    delta = best - base if best is not None and base is not None else None
    row.update({
        "best": best_label,
        "delta": delta,
        "abs_delta": abs(delta) if delta is not None else None,
        "delta_pct": 100 * delta / (100 - base) if delta is not None and base < 100 else None,
        "tasks": list(tasks),
    })
    return row


def _fmt(x: float | None, digits: int = 1) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def table3_cell(row: dict[str, Any], column: str, digits: int = 1) -> str:
    """One Table 3 cell as text: ``median (min–max)`` over pre-training seeds, the median alone for one seed, ``–`` if none."""
    value, lo, hi = row[column], row[f"{column} min"], row[f"{column} max"]
    spread = f" ({_fmt(lo, digits)}–{_fmt(hi, digits)})" if value is not None and row[f"{column} n"] > 1 else ""
    return _fmt(value, digits) + spread


def table3_markdown(rows: Sequence[dict[str, Any]], *, columns: Sequence[str] = TABLE3_COLUMNS, digits: int = 1) -> str:
    """Table 3 as a markdown table: one line per task, per arm its columns, ``|Δ|`` (escaped: ``\\|Δ\\|``) and ``Δ%``.

    A cell is ``median (min–max)`` over pre-training seeds (the median alone for one
    seed); ``–`` where a configuration has no result.
    """
    arms = list(dict.fromkeys(r["arm"] for r in rows))
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    by = {(r["task"], r["arm"]): r for r in rows}
    header = ["task"] + [f"({arm}) {c}" if i == 0 else c for arm in arms for i, c in enumerate([*columns, r"\|Δ\|", "Δ%"])]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for task in tasks:
        cells = [task]
        for arm in arms:
            r = by.get((task, arm))
            if r is None:
                cells += ["–"] * (len(columns) + 2)
                continue
            cells += [table3_cell(r, c, digits) for c in columns]
            cells += [_fmt(r["abs_delta"], digits), "–" if r["delta_pct"] is None else f"{r['delta_pct']:.{digits}f}%"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def score_by_step(
    records_by_config: Mapping[str, Iterable[dict[str, Any]]], *, task: str | None = None, metric: str = SCORE,
) -> list[dict[str, Any]]:
    """Downstream score against pre-training step, per configuration: mean and spread over its runs.

    Parameters
    ----------
    records_by_config
        ``{configuration: records of its runs}`` (several checkpoints per run, e.g.
        ``posviz finetune RUN --checkpoints all``).
    task
        One task's median (over fine-tuning seeds) ``metric``; default ``None``: the
        mean over tasks of each task's median, over the tasks that every run has
        at every step of every configuration (so that every point averages the same tasks).
    metric
        The metric (default ``score``).

    Returns
    -------
    list of dict
        One row per (configuration, step), by configuration then step: ``config``,
        ``step``, ``mean``, ``sd`` (sample sd; 0 for one run), ``min``, ``max``, ``n``
        (runs), ``values`` (``{source: value}``) and ``tasks``.

    Raises
    ------
    ValueError
        When no task is common to every (run, step), or ``task`` has no results.
    """
    per_config = {c: seed_values(recs, metric=metric) for c, recs in records_by_config.items()}
    if task is None:
        sets = [set(tasks) for runs in per_config.values() for steps in runs.values() for tasks in steps.values()]
        tasks = sorted(set.intersection(*sets)) if sets else []
        if not tasks:
            raise ValueError("no task was fine-tuned at every step of every run: pass task= to plot one task")
    else:
        tasks = [task]
    rows = []
    for config, runs in per_config.items():
        by_step: dict[int, dict[str, float]] = {}
        for source, steps in runs.items():
            for step, values in steps.items():
                if all(t in values for t in tasks):
                    by_step.setdefault(step, {})[source] = statistics.fmean(statistics.median(values[t]) for t in tasks)
        for step in sorted(by_step):
            ys = list(by_step[step].values())
            rows.append({"config": config, "step": step, "mean": statistics.fmean(ys),
                         "sd": statistics.stdev(ys) if len(ys) > 1 else 0.0, "min": min(ys), "max": max(ys),
                         "n": len(ys), "values": dict(by_step[step]), "tasks": list(tasks)})
    if not rows:
        raise ValueError(f"no results for {task or 'the common tasks'} ({metric})")
    return rows
