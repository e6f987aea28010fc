"""Checkpoint manifests of ``posviz train``: writing one, verifying one, listing a run's checkpoints.

``Trainer`` writes ``checkpoint-N/`` file by file, so a process killed (or a disk
filling up) while saving leaves a partial folder. After a save completes, posviz
writes ``checkpoint-N/posviz-manifest.json`` (atomically) listing every file with
its size and SHA-256. A checkpoint counts as complete only if its manifest exists
and every file matches it (:func:`checkpoint_problem`). Training resumes from the
newest complete checkpoint (:mod:`posviz.train.resume`), and a run folder given as
``MODEL`` means its newest complete checkpoint (:mod:`posviz.read.runs`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from posviz.util.provenance import file_sha256

MANIFEST = "posviz-manifest.json"
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def write_manifest(checkpoint: str | Path) -> Path:
    """Record size and SHA-256 of every file in ``checkpoint`` (call after the save completed)."""
    from posviz.util.atomic import write_text_atomic

    folder = Path(checkpoint)
    files = {
        str(p.relative_to(folder)): {"bytes": p.stat().st_size, "sha256": file_sha256(p)}
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != MANIFEST and not p.name.startswith(".")
    }
    target = folder / MANIFEST
    write_text_atomic(target, json.dumps({"files": files}, indent=1) + "\n")
    return target


def checkpoint_problem(checkpoint: str | Path) -> str | None:
    """Why ``checkpoint`` is not complete and intact, or ``None`` if it is."""
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
        if file_sha256(path) != entry["sha256"]:
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
