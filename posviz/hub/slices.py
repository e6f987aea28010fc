"""The local store of byte ranges fetched from Hub files, so that reruns need no network.

Each file of a Hub commit gets a folder
``CACHE/hub-slices/ENDPOINT/ORG--NAME/COMMIT/FILENAME@ETAG/`` (``CACHE`` is
:func:`~posviz.util.paths.cache_dir`) holding ``meta.json`` (size, etag, commit)
and one file per fetched range, named ``START-STOP`` (hexadecimal, stop
exclusive). Every file is written atomically, and only after what it holds was
decoded without error, so a failed or interrupted read stores nothing.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from posviz.util.atomic import atomic_path, write_text_atomic
from posviz.util.paths import cache_dir

_SLICE = re.compile(r"^([0-9a-f]{12})-([0-9a-f]{12})$")


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "_"


def store_folder(endpoint: str, repo_id: str, commit: str) -> Path:
    """Folder of one commit's files: ``hub-slices/ENDPOINT/ORG--NAME/COMMIT``."""
    host = re.sub(r"^https?://", "", endpoint.rstrip("/"))
    return cache_dir("hub-slices", _safe(host), _safe(repo_id.replace("/", "--")), _safe(commit))


class SliceStore:
    """Fetched byte ranges of one file (one endpoint, repo, commit and etag).

    Parameters
    ----------
    folder
        The file's folder in the store (see :func:`SliceStore.for_file`).
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    @classmethod
    def for_file(cls, endpoint: str, repo_id: str, commit: str, filename: str, etag: str) -> SliceStore:
        """The store of ``filename`` as of ``commit`` with ETag ``etag``."""
        return cls(store_folder(endpoint, repo_id, commit) / f"{_safe(filename)}@{_safe(etag)[:64]}")

    @classmethod
    def find(cls, endpoint: str, repo_id: str, commit: str, filename: str) -> SliceStore | None:
        """The stored copy of ``filename`` at ``commit`` (any etag), or ``None`` (no network needed)."""
        folder = store_folder(endpoint, repo_id, commit)
        if not folder.is_dir():
            return None
        hits = [p for p in folder.glob(f"{_safe(filename)}@*") if (p / "meta.json").is_file()]
        if not hits:
            return None
        return cls(max(hits, key=lambda p: (p / "meta.json").stat().st_mtime))

    @classmethod
    def same_content(cls, endpoint: str, repo_id: str, filename: str, etag: str) -> list[SliceStore]:
        """Stores of ``filename`` with content hash ``etag`` at any commit of ``repo_id`` (revisions serving one blob)."""
        root = store_folder(endpoint, repo_id, "_").parent
        if not root.is_dir():
            return []
        return [cls(p) for p in sorted(root.glob(f"*/{_safe(filename)}@{_safe(etag)[:64]}")) if p.is_dir()]

    def meta(self) -> dict[str, Any] | None:
        """``meta.json`` (``size``, ``etag``, ``commit``, ``filename``), or ``None``."""
        try:
            meta = json.loads((self.folder / "meta.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return meta if isinstance(meta, dict) and isinstance(meta.get("size"), int) else None

    def slices(self) -> list[tuple[int, int, Path]]:
        """Stored ranges ``(start, stop, path)``, sorted."""
        if not self.folder.is_dir():
            return []
        found = []
        for p in self.folder.iterdir():
            m = _SLICE.match(p.name)
            if m and p.stat().st_size == int(m.group(2), 16) - int(m.group(1), 16):
                found.append((int(m.group(1), 16), int(m.group(2), 16), p))
        return sorted(found)

    def write(self, meta: dict[str, Any], pieces: list[tuple[int, int, bytes | Path]]) -> None:
        """Store ``pieces`` (bytes, or a finished temporary file to move in) and ``meta.json``."""
        self.folder.mkdir(parents=True, exist_ok=True)
        for start, stop, data in pieces:
            target = self.folder / f"{start:012x}-{stop:012x}"
            if isinstance(data, Path):
                data.replace(target)
            elif not target.exists():
                with atomic_path(target) as tmp:
                    tmp.write_bytes(data)
        write_text_atomic(self.folder / "meta.json", json.dumps(meta, sort_keys=True))
