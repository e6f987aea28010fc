"""Checkpoint integrity for ``posviz train``: manifests, verification, choosing where to resume.

``Trainer`` writes ``checkpoint-N/`` file by file, so a process killed (or a disk
filling up) while saving leaves a partial folder. After a save completes, posviz
writes ``checkpoint-N/posviz-manifest.json`` (atomically) listing every file with
its size and SHA-256. A checkpoint counts as complete only if its manifest exists
and every file matches it. ``--resume`` takes the newest complete checkpoint;
newer incomplete or corrupt ones are moved to ``RUN/corrupt/`` (kept, never
deleted) with a warning, so training loses at most one checkpoint interval.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import warnings
from pathlib import Path

MANIFEST = "posviz-manifest.json"
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_manifest(checkpoint: str | Path) -> Path:
    """Record size and SHA-256 of every file in ``checkpoint`` (call after the save completed)."""
    from posviz.util.atomic import write_text_atomic

    folder = Path(checkpoint)
    files = {
        str(p.relative_to(folder)): {"bytes": p.stat().st_size, "sha256": _sha256(p)}
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != MANIFEST and not p.name.startswith(".")
    }
    target = folder / MANIFEST
    write_text_atomic(target, json.dumps({"files": files}, indent=1) + "\n")
    return target


def checkpoint_problem(checkpoint: str | Path) -> str | None:
    """Why ``checkpoint`` cannot be resumed from, or ``None`` if it is complete and intact."""
    folder = Path(checkpoint)
    try:
        files = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))["files"]
    except FileNotFoundError:
        return "it was not finished (no manifest)"
    except (OSError, ValueError, KeyError, TypeError):
        return "its manifest is unreadable"
    for name, entry in files.items():
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != entry["bytes"]:
            return f"{name} has {path.stat().st_size} bytes instead of {entry['bytes']}"
        if _sha256(path) != entry["sha256"]:
            return f"{name} does not match its checksum"
    return None


def checkpoints(run_dir: str | Path) -> list[Path]:
    """``checkpoint-N`` folders of a run, newest (largest N) first."""
    found = [p for p in Path(run_dir).iterdir() if p.is_dir() and _CHECKPOINT.match(p.name)]
    return sorted(found, key=lambda p: int(_CHECKPOINT.match(p.name).group(1)), reverse=True)


def checkpoint_step(checkpoint: str | Path) -> int:
    """The step ``N`` of ``checkpoint-N``."""
    m = _CHECKPOINT.match(Path(checkpoint).name)
    if m is None:
        raise ValueError(f"not a checkpoint folder: {checkpoint}")
    return int(m.group(1))


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

    Newer checkpoints that fail :func:`checkpoint_problem` are moved to
    ``run_dir/corrupt/`` with a warning naming the problem and the fallback.
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
