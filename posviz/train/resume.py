"""Choosing where ``--resume`` starts: the newest complete checkpoint of a run.

Newer incomplete or corrupt checkpoints (:func:`posviz.read.manifests.checkpoint_problem`)
are moved to ``RUN/corrupt/`` (kept, never deleted) with a warning, so training
loses at most one checkpoint interval.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

from posviz.read.manifests import checkpoint_problem, checkpoints


def _set_aside(folder: Path) -> Path:
    dest_dir = folder.parent / "corrupt"
    dest_dir.mkdir(exist_ok=True)
    dest = dest_dir / folder.name
    k = 1
    while dest.exists():
        dest = dest_dir / f"{folder.name}.{k}"
        k += 1
    shutil.move(str(folder), str(dest))
    return dest


def resume_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest complete checkpoint of a run (``None`` if there is none).

    Newer checkpoints that fail :func:`~posviz.read.manifests.checkpoint_problem` are
    moved to ``run_dir/corrupt/`` with a warning naming the problem and the fallback.
    """
    for folder in checkpoints(run_dir):
        problem = checkpoint_problem(folder)
        if problem is None:
            return folder
        moved = _set_aside(folder)
        warnings.warn(
            f"{folder.name} cannot be resumed from: {problem}; moved it to {moved.parent.name}/{moved.name} "
            "and falling back to the previous checkpoint",
            stacklevel=2,
        )
    return None
