"""Run folders of ``posviz train`` as models: ``RUN`` (its newest complete checkpoint) and ``RUN@STEP``.

A run folder holds ``run.json`` (the run's options), ``trajectory.json`` (its log)
and ``checkpoint-N/`` folders, each complete once its manifest verifies
(:mod:`posviz.read.manifests`). Wherever a command takes ``MODEL``, ``RUN`` means
the newest complete checkpoint (newer incomplete or corrupt ones are skipped with
a warning) and ``RUN@STEP`` the checkpoint of step ``STEP``. Anything else is
left to the other kinds of source (:func:`posviz.read.sources.resolve_source`).
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from pathlib import Path

from posviz.errors import SourceError
from posviz.read.manifests import MANIFEST, checkpoint_problem, checkpoint_step, checkpoints

#: The run's options (written first, so every run folder has it).
RUN_FILE = "run.json"
#: The run's log, one record per evaluation (:mod:`posviz.train.log`).
LOG_JSON = "trajectory.json"

_STEP = re.compile(r"[0-9]+")


def is_run_folder(path: str | Path) -> bool:
    """True for a ``posviz train`` run folder: ``run.json`` or ``trajectory.json``, and no ``config.json``.

    A folder with a ``config.json`` is a model folder whatever else it holds.
    """
    folder = Path(path)
    return folder.is_dir() and not (folder / "config.json").is_file() and any(
        (folder / name).is_file() for name in (RUN_FILE, LOG_JSON)
    )


def run_reference(spec: str) -> tuple[str, str | None] | None:
    """``(run folder, text after @)`` when ``spec`` names a run or one of its steps, else ``None``.

    ``RUN`` gives ``(RUN, None)``. ``FOLDER@TEXT``, where ``FOLDER`` is an existing
    local folder and the whole spec is not an existing path, gives ``(FOLDER, TEXT)``
    when ``FOLDER`` is a run folder or ``TEXT`` is a number; other ``NAME@REV`` specs
    are left to hub ids. Nothing is validated here (see :func:`run_checkpoint`).
    """
    path = Path(spec).expanduser()
    if path.exists():
        return (spec, None) if is_run_folder(path) else None
    head, sep, tail = spec.rpartition("@")
    if not sep or not head:
        return None
    folder = Path(head).expanduser()
    if folder.is_dir() and (is_run_folder(folder) or _STEP.fullmatch(tail)):
        return head, tail
    return None


@dataclass(frozen=True)
class RunCheckpoint:
    """One complete checkpoint of a run, chosen by :func:`run_checkpoint`.

    Attributes
    ----------
    run
        The run folder as typed (no ``@STEP``, no trailing separator).
    folder
        Its ``checkpoint-N`` folder.
    step
        ``N``.
    skipped
        Newer checkpoints passed over, as ``(name, why)`` (only when no step was asked for).
    """

    run: str
    folder: Path
    step: int
    skipped: tuple[tuple[str, str], ...] = ()

    def describe(self) -> str:
        """``run RUN, checkpoint-N (step N)``: which weights were read."""
        return f"run {self.run}, {self.folder.name} (step {self.step})"


# Verifying a manifest hashes every file of the checkpoint; a command may resolve the
# same run several times (once per layer), so verdicts are kept while the files are unchanged,
# and each skipped checkpoint is warned about once.
_verdicts: dict[tuple, str | None] = {}
_warned: set[tuple[str, str]] = set()


def _problem(folder: Path) -> str | None:
    try:
        stamp = tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*")) if p.is_file())
    except OSError as e:
        return f"it cannot be read ({e.strerror})"
    key = (str(folder.resolve()), stamp)
    if key not in _verdicts:
        _verdicts[key] = checkpoint_problem(folder)
    return _verdicts[key]


def _kept(found: list[Path]) -> str:
    steps = sorted(checkpoint_step(c) for c in found)
    return f"kept steps: {', '.join(map(str, steps))}" if steps else "it kept no checkpoint"


def run_checkpoint(run: str | Path, step: str | None = None, *, spec: str | None = None) -> RunCheckpoint:
    """The checkpoint a run folder stands for: the newest complete one, or the one of ``step``.

    Parameters
    ----------
    run
        A ``posviz train`` run folder.
    step
        The text after ``@`` in ``RUN@STEP`` (digits), or ``None`` for the newest
        complete checkpoint.
    spec
        The argument as the user gave it, for messages (default ``run``).

    Returns
    -------
    RunCheckpoint
        Newer checkpoints that are incomplete (no manifest yet) or corrupt (a file
        does not match it) are skipped, each with a warning.

    Raises
    ------
    SourceError
        ``run`` is not a run folder; the run has no complete checkpoint (naming how
        many incomplete ones were skipped); ``step`` is not a number, no checkpoint
        of that step was kept, or it is incomplete (each listing the kept steps).
    """
    folder = Path(run).expanduser()
    label = str(run).rstrip("/\\") or str(run)
    spec = spec or label
    if not is_run_folder(folder):
        raise SourceError(f"{spec}: {label} is not a posviz train run folder (no {RUN_FILE} or {LOG_JSON}), so @{step} cannot select a step",
                          "give RUN@STEP for a run folder, or org/name@revision for a hub model")
    found = checkpoints(folder)
    if step is not None:
        if not _STEP.fullmatch(step):
            raise SourceError(f"{spec}: the text after @ must be a step number ({_kept(found)})")
        wanted = int(step)
        chosen = next((c for c in found if checkpoint_step(c) == wanted), None)
        if chosen is None:
            raise SourceError(f"{spec}: {label} kept no checkpoint of step {wanted} ({_kept(found)})")
        problem = _problem(chosen)
        if problem is not None:
            raise SourceError(f"{spec}: {chosen.name} of {label} is incomplete or corrupt: {problem}",
                              f"choose another step ({_kept(found)})")
        return RunCheckpoint(label, chosen, wanted)
    skipped = []
    for c in found:  # newest first; only the checkpoints up to the first complete one are verified
        problem = _problem(c)
        if problem is None:
            for name, why in skipped:
                if (str(folder.resolve() / name), why) not in _warned:
                    _warned.add((str(folder.resolve() / name), why))
                    warnings.warn(f"{label}: skipping {name} ({why}); using {c.name}", stacklevel=2)
            return RunCheckpoint(label, c, checkpoint_step(c), tuple(skipped))
        skipped.append((c.name, problem))
    if not found:
        raise SourceError(f"{spec}: this posviz train run has no checkpoint yet",
                          "checkpoints are written every --save-every steps and at the end of the run")
    listed = "; ".join(f"{name}: {why}" for name, why in skipped)
    raise SourceError(f"{spec}: this posviz train run has no complete checkpoint; "
                      f"skipped {len(skipped)} incomplete or corrupt checkpoint(s) ({listed})",
                      f"a checkpoint counts once its {MANIFEST} verifies; pass {label}/checkpoint-N to read one regardless")
