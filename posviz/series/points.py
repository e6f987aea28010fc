"""Checkpoint series: Toeplitzness of E_P along training steps (``posviz trajectory``).

A series is a ``posviz train`` run folder (every kept complete checkpoint, by step;
``RUN@STEP`` gives one of them), the hub ids that share a name once their step is
removed (MultiBERTs: ``google/multiberts-seed_0-step_20k`` ... ``-step_2000k``), or
the revisions of one hub repository named by step (``--revisions step_20k,...``,
scored as ``org/name@step_20k``). :func:`series_points` and :func:`revision_points`
turn the command-line sources into :class:`SeriesPoint` objects, :func:`series_rows`
scores them through :func:`posviz.scoring.batch.score_models` (score cache, offline
planning) and returns rows sorted by step, and :func:`series_band` gives the mean
and sd over series at their common steps. See ARCHITECTURE.md.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from posviz.errors import OptionError, SourceError

if TYPE_CHECKING:
    from posviz.scoring.cache import ScoreCache, ScoreSettings

# ``step_20k``, ``step-20000``, ``step1000`` anywhere in a name (the last one counts) ...
_STEP_IN_NAME = re.compile(r"(?<![a-z])step[_-]?(\d+)(k?)", re.IGNORECASE)
_STEP_PART = re.compile(r"[-_.]?(?<![a-z])step[_-]?\d+k?", re.IGNORECASE)
# ... or a name that is only a step: ``20k``, ``20000`` (a revision named by its step).
_BARE_STEP = re.compile(r"(\d+)(k?)", re.IGNORECASE)


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


def parse_step(name: str) -> int | None:
    """The step a name carries, or ``None``.

    ``…step_20k`` → 20000, ``…step-20000`` → 20000, ``step1000`` → 1000 (the last
    such part counts; ``k`` = ×1000), or a name that is only a step: ``20k``, ``20000``.
    """
    found = _STEP_IN_NAME.findall(name)
    if found:
        digits, k = found[-1]
    elif (bare := _BARE_STEP.fullmatch(name)) is not None:
        digits, k = bare.groups()
    else:
        return None
    return int(digits) * (1000 if k else 1)


def step_from_name(name: str) -> int | None:
    """The step a hub id's name carries (``step_20k`` → 20000, ``step_0`` → 0), or ``None``.

    Only the repository name is read (not the organisation nor a ``@revision``), by
    the rules of :func:`parse_step`. A local ``checkpoint-N`` folder carries ``N``.
    """
    from pathlib import Path

    from posviz.read.manifests import checkpoint_step

    if Path(name).expanduser().is_dir():
        try:
            return checkpoint_step(Path(name).expanduser())
        except ValueError:
            pass
    return parse_step(name.partition("@")[0].rsplit("/", 1)[-1])


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


def _run_step_point(spec: str, run: str, step: str) -> SeriesPoint:
    """``RUN@STEP``: that one kept checkpoint, in the series of its run."""
    from posviz.read.runs import run_checkpoint

    chosen = run_checkpoint(run, step, spec=spec)
    return SeriesPoint(str(chosen.folder), chosen.run, chosen.step)


def series_points(sources: Sequence[str], steps: Sequence[int] | None = None) -> list[SeriesPoint]:
    """Command-line sources as checkpoints with a series and a step, sorted by step, then series.

    Parameters
    ----------
    sources
        ``posviz train`` run folders (every kept checkpoint), ``RUN@STEP`` (that
        checkpoint), and/or hub ids (or checkpoint folders) whose name carries the
        step (:func:`parse_step`).
    steps
        One step per source that is neither a run folder nor ``RUN@STEP``, in order,
        for names without a step (``--steps``); overrides the steps in the names.

    Raises
    ------
    OptionError
        ``steps`` does not give one step per id; some ids carry no step and no
        ``steps`` were given (naming them); a series has two checkpoints of one step.
    SourceError
        A run folder has no (complete) checkpoint; ``RUN@STEP`` names a step the run
        did not keep (or an incomplete one).
    """
    from posviz.read.runs import run_reference

    refs = {s: run_reference(s) for s in sources}
    ids = [s for s in sources if refs[s] is None]
    if steps is not None and len(steps) != len(ids):
        raise OptionError(f"--steps gives {len(steps)} step(s) for {len(ids)} id(s); give one step per id, in order")
    if steps is None:
        nameless = [s for s in ids if step_from_name(s) is None]
        if nameless:
            raise OptionError(f"no step in the name of {', '.join(nameless)}",
                              "name steps with --steps S1,S2,... (one per id), or use ids like org/name-step_20k")
    points = []
    for s, ref in refs.items():
        if ref is not None:
            points.extend(_run_points(s) if ref[1] is None else [_run_step_point(s, *ref)])
    for i, s in enumerate(ids):
        step = steps[i] if steps is not None else step_from_name(s)
        points.append(SeriesPoint(s, _series_of(s), int(step)))
    return _sorted_unique(points)


def revision_points(sources: Sequence[str], revisions: Sequence[str], steps: Sequence[int] | None = None) -> list[SeriesPoint]:
    """The revisions of one hub repository as a series (``--revisions``), sorted by step.

    Each revision becomes the spec ``org/name@REV``, resolved like any hub id with a
    revision (HF cache refs, then the Hub); the series is named after the repository.

    Parameters
    ----------
    sources
        Exactly one hub id, without ``@revision``.
    revisions
        Branches, tags or commits, one per checkpoint.
    steps
        One step per revision, in order (``--steps``); else each revision's name
        must carry its step (:func:`parse_step`: ``step_20k``, ``step-20000``, ``20k``).

    Raises
    ------
    OptionError
        Not exactly one hub id; an empty or repeated revision; ``steps`` does not give
        one step per revision; revisions without a step and no ``steps`` (naming them);
        two revisions of one step.
    """
    from pathlib import Path

    from posviz.read.sources import looks_like_hub_id

    if len(sources) != 1:
        raise OptionError(f"--revisions takes one hub id as SOURCE, got {len(sources)} sources",
                          "give org/name once; its revisions are the checkpoints")
    repo = sources[0]
    if "@" in repo or not looks_like_hub_id(repo) or Path(repo).expanduser().exists():
        raise OptionError(f"--revisions takes one hub id (org/name, without @revision) as SOURCE, not {repo}")
    if not revisions or any(not r for r in revisions):
        raise OptionError("--revisions: give revision names separated by commas, e.g. step_20k,step_40k")
    repeated = sorted({r for r in revisions if revisions.count(r) > 1})
    if repeated:
        raise OptionError(f"--revisions names {', '.join(repeated)} more than once")
    if steps is not None and len(steps) != len(revisions):
        raise OptionError(f"--steps gives {len(steps)} step(s) for {len(revisions)} revision(s); "
                          "give one step per revision, in order")
    if steps is None:
        nameless = [r for r in revisions if parse_step(r) is None]
        if nameless:
            raise OptionError(f"no step in the revision name of {', '.join(nameless)}",
                              "name steps with --steps S1,S2,... (one per revision), or use revisions like step_20k")
    chosen = steps if steps is not None else [parse_step(r) for r in revisions]
    return _sorted_unique([SeriesPoint(f"{repo}@{r}", repo, int(t)) for r, t in zip(revisions, chosen, strict=True)])


def _sorted_unique(points: list[SeriesPoint]) -> list[SeriesPoint]:
    """Points sorted by step, then series, each once (``RUN`` and ``RUN@STEP`` overlap).

    Two different checkpoints of one step in one series are refused: a series has one
    value per step.
    """
    seen: dict[tuple[str, int], str] = {}
    for p in points:
        other = seen.setdefault((p.series, p.step), p.spec)
        if other != p.spec:
            raise OptionError(f"{p.series}: {other} and {p.spec} are both step {p.step}",
                              "give each step of a series once (--steps can set them)")
    return sorted(dict.fromkeys(points), key=lambda p: (p.step, p.series))


def series_rows(
    points: Sequence[SeriesPoint],
    settings: ScoreSettings,
    *,
    cache: ScoreCache | None = None,
    allow_missing: bool = False,
    on_read: Callable[[SeriesPoint, Any, Any], None] | None = None,
) -> tuple[list[dict[str, Any]], list[str]]:
    """Score every checkpoint: one row per point, sorted by step, then series.

    Each row is a ``posviz toeplitzness --format json`` row (same fields, same
    meaning) with ``series`` and ``step`` after ``model``. ``on_read(point, source,
    embeddings)`` sees every E_P read (not those scored from the cache), e.g. to check
    the series (:mod:`posviz.series.integrity`) without reading it again.

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
    from posviz.scoring.batch import MissingModelsError, ModelRequest, score_models

    requests = [ModelRequest(p.spec) for p in points]
    by_request = {id(r): p for r, p in zip(requests, points, strict=True)}
    seen = None if on_read is None else (lambda req, source, pe: on_read(by_request[id(req)], source, pe))
    scored = score_models(requests, settings, cache=cache, allow_missing=allow_missing,
                          missing_alternative="pass checkpoint folders", partial_alternative="--allow-missing to go on without them",
                          progress_label="checkpoint", on_read=seen)
    if not scored.rows:
        raise MissingModelsError([m.spec for m in scored.missing], scored.missing_reason or "")
    rows = []
    for row, req in zip(scored.rows, scored.requests, strict=True):
        p = by_request[id(req)]
        model = row.get("model", p.spec)
        if p.spec.startswith(f"{model}@"):  # a hub row is labelled by its repo; the revisions of a series differ
            model = p.spec
        rows.append({"model": model, "series": p.series, "step": p.step,
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
