"""Checkpoint series: Toeplitzness of E_P along training steps (``posviz trajectory``).

A series is a ``posviz train`` run folder (every kept complete checkpoint, by step)
or the hub ids that share a name once their step is removed (MultiBERTs:
``google/multiberts-seed_0-step_20k`` ... ``-step_2000k``). :func:`series_points`
turns the command-line sources into :class:`SeriesPoint` objects, :func:`series_rows`
scores them through :func:`posviz.batch.scoring.score_models` (score cache, offline
planning) and returns rows sorted by step, and :func:`series_band` gives the mean
and sd over series at their common steps. See ARCHITECTURE.md.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from posviz.errors import OptionError, SourceError

if TYPE_CHECKING:
    from posviz.batch.cache import ScoreCache, ScoreSettings

_STEP_IN_NAME = re.compile(r"step_(\d+)(k?)")
_STEP_PART = re.compile(r"[-_.]?step_\d+k?")


@dataclass(frozen=True)
class SeriesPoint:
    """One checkpoint of a series.

    Attributes
    ----------
    spec
        What is scored: a hub id or a checkpoint folder.
    series
        The series it belongs to (a run folder, or a hub id without its step).
    step
        Its training step.
    """

    spec: str
    series: str
    step: int


def step_from_name(name: str) -> int | None:
    """The step a hub id's name carries (``step_20k`` → 20000, ``step_0`` → 0), or ``None``.

    Only the repository name is read (not the organisation nor a ``@revision``). A
    local ``checkpoint-N`` folder carries ``N``.
    """
    from pathlib import Path

    from posviz.read.manifests import checkpoint_step

    if Path(name).expanduser().is_dir():
        try:
            return checkpoint_step(Path(name).expanduser())
        except ValueError:
            pass
    repo = name.partition("@")[0].rsplit("/", 1)[-1]
    found = _STEP_IN_NAME.findall(repo)
    if not found:
        return None
    digits, k = found[-1]
    return int(digits) * (1000 if k else 1)


def series_name(name: str) -> str:
    """A hub id without its step: ``google/multiberts-seed_0-step_20k`` → ``google/multiberts-seed_0``."""
    org, slash, repo = name.partition("@")[0].rpartition("/")
    return org + slash + _STEP_PART.sub("", repo)


def _series_of(spec: str) -> str:
    """A ``checkpoint-N`` folder belongs to its run folder; a hub id to its name without the step."""
    from pathlib import Path

    path = Path(spec).expanduser()
    if path.is_dir() and path.name.startswith("checkpoint-"):
        return str(Path(spec.rstrip("/\\")).parent)
    return series_name(spec)


def _run_points(run: str) -> list[SeriesPoint]:
    """Every kept complete checkpoint of a run folder (incomplete ones skipped with a warning)."""
    from pathlib import Path

    from posviz.read.manifests import checkpoint_problem, checkpoint_step, checkpoints

    label = run.rstrip("/\\") or run
    found = checkpoints(Path(run).expanduser())
    if not found:
        raise SourceError(f"{run}: this posviz train run has no checkpoint yet",
                          "checkpoints are written every --save-every steps and at the end of the run")
    points = []
    for c in found:
        problem = checkpoint_problem(c)
        if problem is None:
            points.append(SeriesPoint(str(c), label, checkpoint_step(c)))
        else:
            warnings.warn(f"{label}: skipping {c.name} ({problem})", stacklevel=2)
    if not points:
        raise SourceError(f"{run}: this posviz train run has no complete checkpoint",
                          f"pass {label}/checkpoint-N to read one regardless")
    return points


def series_points(sources: Sequence[str], steps: Sequence[int] | None = None) -> list[SeriesPoint]:
    """Command-line sources as checkpoints with a series and a step, sorted by step, then series.

    Parameters
    ----------
    sources
        ``posviz train`` run folders and/or hub ids (or checkpoint folders) whose name
        carries the step (``step_(\\d+)(k?)``).
    steps
        One step per source that is not a run folder, in order, for names without a
        step (``--steps``); overrides the steps in the names.

    Raises
    ------
    OptionError
        ``steps`` does not give one step per id, or some ids carry no step and no
        ``steps`` were given (naming them).
    SourceError
        A run folder has no (complete) checkpoint.
    """
    from posviz.read.runs import run_reference

    runs = [s for s in sources if (ref := run_reference(s)) is not None and ref[1] is None]
    ids = [s for s in sources if s not in runs]
    if steps is not None and len(steps) != len(ids):
        raise OptionError(f"--steps gives {len(steps)} step(s) for {len(ids)} id(s); give one step per id, in order")
    if steps is None:
        nameless = [s for s in ids if step_from_name(s) is None]
        if nameless:
            raise OptionError(f"no step in the name of {', '.join(nameless)}",
                              "name steps with --steps S1,S2,... (one per id), or use ids like org/name-step_20k")
    points = [p for r in runs for p in _run_points(r)]
    for i, s in enumerate(ids):
        step = steps[i] if steps is not None else step_from_name(s)
        points.append(SeriesPoint(s, _series_of(s), int(step)))
    return sorted(points, key=lambda p: (p.step, p.series))


def series_rows(
    points: Sequence[SeriesPoint],
    settings: ScoreSettings,
    *,
    cache: ScoreCache | None = None,
    allow_missing: bool = False,
) -> tuple[list[dict[str, Any]], list[str]]:
    """Score every checkpoint: one row per point, sorted by step, then series.

    Each row is a ``posviz toeplitzness --format json`` row (same fields, same
    meaning) with ``series`` and ``step`` after ``model``.

    Returns
    -------
    rows, missing
        The rows and the specs left out (only with ``allow_missing``).

    Raises
    ------
    MissingModelsError
        Offline with checkpoints in neither cache, naming every one, before any scoring.
    SourceError
        The checkpoints of one series have different position counts.
    """
    from posviz.batch.scoring import MissingModelsError, ModelRequest, score_models

    requests = [ModelRequest(p.spec) for p in points]
    by_request = {id(r): p for r, p in zip(requests, points, strict=True)}
    scored = score_models(requests, settings, cache=cache, allow_missing=allow_missing,
                          missing_alternative="pass checkpoint folders", partial_alternative="--allow-missing to go on without them",
                          progress_label="checkpoint")
    if not scored.rows:
        raise MissingModelsError([m.spec for m in scored.missing], scored.missing_reason or "")
    rows = []
    for row, req in zip(scored.rows, scored.requests, strict=True):
        p = by_request[id(req)]
        rows.append({"model": row.get("model", p.spec), "series": p.series, "step": p.step,
                     **{k: v for k, v in row.items() if k != "model"}})
    _check_positions(rows)
    rows.sort(key=lambda r: (r["step"], r["series"]))
    return rows, [m.spec for m in scored.missing]


def _check_positions(rows: list[dict[str, Any]]) -> None:
    counts: dict[str, dict[int, list[int]]] = {}
    for r in rows:
        counts.setdefault(r["series"], {}).setdefault(int(r["positions"]), []).append(r["step"])
    for series, by_n in counts.items():
        if len(by_n) > 1:
            detail = "; ".join(f"{n} at step(s) {', '.join(map(str, sorted(s)))}" for n, s in sorted(by_n.items()))
            raise SourceError(f"{series}: the checkpoints of this series have different position counts ({detail})",
                              "R² over different n is not comparable along a series; "
                              "give them as separate series or pick the same rows with --positions")


def series_band(rows: Sequence[dict[str, Any]], field: str) -> list[tuple[int, float, float, int]]:
    """Mean and sd of ``field`` over series, at each step every series has.

    Returns
    -------
    list of (step, mean, sd, number of series)
        sd is the sample sd (ddof 1; 0 for one series).
    """
    import numpy as np

    series = {r["series"] for r in rows}
    by_step: dict[int, list[float]] = {}
    for r in rows:
        by_step.setdefault(r["step"], []).append(float(r[field]))
    common = sorted(s for s, v in by_step.items() if len(v) == len(series))
    out = []
    for s in common:
        v = np.asarray(by_step[s])
        out.append((s, float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else 0.0, len(v)))
    return out
