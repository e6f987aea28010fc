"""A persistent cache of Toeplitzness scores, so that each checkpoint is read once.

Entries live under the user's cache folder (:func:`cache_dir`), one small JSON file
per (model, revision, settings). The key holds everything the score depends on:
the model's identity (hub id, package or absolute path), for hub models the
endpoint it came from (``HF_ENDPOINT``, normalised by
:func:`~posviz.util.endpoints.normalize_endpoint`: a mirror or a local test server
is another Hub), its revision (hub commit hash, package version, or the sizes and
modification times of a local folder's files), the position table, the positions
kept, the normalisation, the null baseline's draws and seed, and
:data:`SCORE_FORMAT` (bumped whenever scoring or the key changes, which retires
every older entry: older entries stay on disk, unread, under their own folder).

Entries are written to a temporary file, flushed to disk and renamed, so a killed
process leaves either the old entry or the new one. Each carries a SHA-256 of its
content; an entry that is unreadable, truncated, altered or written for another key
is ignored with a warning (and recomputed by the caller), never returned.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import warnings
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from posviz.util.endpoints import normalize_endpoint
from posviz.util.paths import cache_dir

#: Version of the cached results: of the scoring code and of the key.
#: 2: exact null mean (was the mean of the sampled draws).
#: 3: hub entries keyed by endpoint; v2 entries lack it, so they cannot be attributed and are not read.
SCORE_FORMAT = 3

_MAGIC = "posviz-score-cache"
_MAX_ENTRY_BYTES = 1 << 20  # real entries are ~1 kB; anything huge is not ours
_REQUIRED_FLOATS = ("toeplitzness", "toeplitzness_offdiag")


class CacheWarning(UserWarning):
    """A cache entry was ignored or could not be written; the result is recomputed."""


@dataclass(frozen=True)
class ScoreSettings:
    """Everything besides the model that a cached score depends on.

    Attributes
    ----------
    normalize
        ``none``, ``cosine`` or ``center``.
    null_draws, seed
        Null-baseline settings.
    positions
        Positions kept, normalised to ``"A:B"`` (either side may be empty), or ``None``.
    table
        Position table for models with several, or ``None`` (the default table).
    """

    normalize: str = "none"
    null_draws: int = 10
    seed: int = 0
    positions: str | None = None
    table: str | None = None

    @staticmethod
    def normalize_positions(positions: str | slice | None) -> str | None:
        """``"A:B"`` for a positions option or slice (``None`` for all positions)."""
        if positions is None or positions == "":
            return None
        if isinstance(positions, str):
            from posviz.read.embeddings import parse_positions

            positions = parse_positions(positions)
        if positions is None:
            return None
        a = "" if positions.start is None else str(positions.start)
        b = "" if positions.stop is None else str(positions.stop)
        return f"{a}:{b}"


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=True)


def _digest(obj: Any) -> str:
    return hashlib.sha256(_canonical(obj).encode("utf-8")).hexdigest()


def current_endpoint() -> str:
    """The Hub endpoint in use now (``HF_ENDPOINT`` or the default), normalised."""
    from posviz.read.sources import hub_endpoint

    return normalize_endpoint(hub_endpoint())


def make_key(identity: str, revision: str, settings: ScoreSettings, *, endpoint: str | None = None) -> dict[str, Any]:
    """The cache key of one score: model identity, endpoint, revision, settings, format.

    Parameters
    ----------
    identity
        ``hub:org/name``, ``package:org/name`` or ``path:/absolute/path``.
    revision
        Hub commit hash, package version or :func:`local_fingerprint`.
    settings
        Scoring settings.
    endpoint
        For hub identities (required): the Hub the commit was read from, e.g.
        :func:`current_endpoint`; normalised here. Not allowed for the others.

    Raises
    ------
    ValueError
        If a hub identity comes without an endpoint, or another with one.
    """
    is_hub = identity.startswith("hub:")
    if is_hub != (endpoint is not None):
        raise ValueError(f"{identity}: an endpoint is {'required' if is_hub else 'only for hub models'}")
    where = {"endpoint": normalize_endpoint(endpoint)} if endpoint is not None else {}
    return {"format": SCORE_FORMAT, "model": identity, **where, "revision": revision, **asdict(settings)}


def local_fingerprint(paths: list[Path]) -> str:
    """A revision for local files: SHA-256 of their names, sizes and modification times.

    Hashing the contents of multi-gigabyte weight files would cost more than the
    score itself; any rewrite of a file changes its size or mtime.
    """
    stats = []
    for p in sorted(paths):
        st = p.stat()
        stats.append([p.name, st.st_size, st.st_mtime_ns])
    return "files-" + _digest(stats)[:24]


def source_identity(source) -> tuple[str, str]:
    """``(identity, revision)`` of a resolved :class:`~posviz.read.sources.Source`.

    Hub models: ``hub:org/name`` and the commit hash. Packaged models:
    ``package:org/name`` and the distribution version. Local folders and files:
    ``path:/absolute/path`` and :func:`local_fingerprint` of the config and
    weight files.
    """
    if source.kind == "hub":
        return f"hub:{source.repo_id}", str(source.revision)
    if source.kind == "package":
        return f"package:{source.repo_id}", str(source.revision)
    root = Path(source.root).resolve()
    if source.kind == "file":
        target = root / source.files[0]
        files = [target] + [p for p in [root / "config.json"] if p.is_file()]
        return f"path:{target}", local_fingerprint(files)
    files = [p for p in root.iterdir() if p.is_file() and p.suffix in (".json", ".safetensors", ".bin", ".pt", ".pth")]
    return f"path:{root}", local_fingerprint(files)


def source_key(source, settings: ScoreSettings) -> dict[str, Any]:
    """The cache key of a resolved source's score; hub models are keyed by :func:`current_endpoint` too."""
    endpoint = current_endpoint() if source.kind == "hub" else None
    return make_key(*source_identity(source), settings, endpoint=endpoint)


def _bad(path: Path, reason: str) -> None:
    warnings.warn(f"ignoring score cache entry {path} ({reason}); it will be recomputed", CacheWarning, stacklevel=3)
    with contextlib.suppress(OSError):  # best effort: the next write replaces it anyway
        path.unlink()


class ScoreCache:
    """Cached Toeplitzness score rows, keyed by :func:`make_key`.

    Parameters
    ----------
    root
        Cache folder; default :func:`cache_dir`. Entries go under
        ``root/scores/v<SCORE_FORMAT>/<model>/<key hash>.json``, one ``<model>``
        folder per model identity and (for hub models) endpoint.

    Notes
    -----
    Reading never raises (except :class:`ValueError` for a hub model asked for
    without an endpoint): a missing, unreadable or invalid entry is a miss (invalid
    ones are reported with a :class:`CacheWarning` and removed). Writing never
    raises either: a cache that cannot be written (read-only, disk full) is
    reported with a warning and the command goes on. Folders of other formats are
    never read, changed or removed (except by :meth:`clear`).
    """

    def __init__(self, root: str | os.PathLike | None = None) -> None:
        self.root = Path(root) if root is not None else cache_dir()

    @property
    def folder(self) -> Path:
        """Folder of the entries of the current :data:`SCORE_FORMAT`."""
        return self.root / "scores" / f"v{SCORE_FORMAT}"

    def model_folder(self, identity: str, endpoint: str | None = None) -> Path:
        """Folder holding every entry of one model from one endpoint (all revisions and settings)."""
        name = re.sub(r"[^A-Za-z0-9._-]+", "_", identity.split(":", 1)[-1])[-60:].strip("_.") or "model"
        where = identity if endpoint is None else [identity, normalize_endpoint(endpoint)]
        return self.folder / f"{name}-{_digest(where)[:12]}"

    def path_for(self, key: dict[str, Any]) -> Path:
        """Where the entry for ``key`` is stored."""
        return self.model_folder(key["model"], key.get("endpoint")) / f"{_digest(key)[:32]}.json"

    # ---- reading -------------------------------------------------------
    def _load(self, path: Path) -> dict[str, Any] | None:
        """A validated entry, or ``None`` (invalid entries are warned about and removed)."""
        try:
            if path.stat().st_size > _MAX_ENTRY_BYTES:
                _bad(path, "too large")
                return None
            raw = path.read_bytes()
        except OSError:
            return None
        try:
            entry = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            _bad(path, "not valid JSON, probably truncated")
            return None
        if not isinstance(entry, dict) or entry.get("magic") != _MAGIC:
            _bad(path, "not a posviz score cache entry")
            return None
        key, result = entry.get("key"), entry.get("result")
        if not isinstance(key, dict) or not isinstance(result, dict):
            _bad(path, "key or result missing")
            return None
        if entry.get("sha256") != _digest({"key": key, "result": result}):
            _bad(path, "checksum mismatch")
            return None
        for name in _REQUIRED_FLOATS:
            value = result.get(name)
            if not isinstance(value, (int, float)) or not math.isfinite(value):
                _bad(path, f"no valid {name}")
                return None
        return entry

    def get(self, key: dict[str, Any]) -> dict[str, Any] | None:
        """The cached result for exactly ``key``, or ``None``."""
        path = self.path_for(key)
        entry = self._load(path)
        if entry is None:
            return None
        if entry["key"] != key:  # a hash collision, or a file copied from elsewhere
            _bad(path, "written for a different key")
            return None
        return entry["result"]

    def latest(
        self, identity: str, settings: ScoreSettings, *, endpoint: str | None = None, revision: str | None = None
    ) -> tuple[dict[str, Any], str] | None:
        """The newest result for a model with these settings, from this endpoint.

        Used for hub models that are no longer in the Hugging Face cache (and
        cannot be downloaded). Only entries of the same ``endpoint`` count: a
        score read from a mirror or a test server is never passed off as the
        Hub's, nor the other way round.

        Parameters
        ----------
        identity, settings, endpoint
            As for :func:`make_key` (``endpoint`` is required for hub identities).
        revision
            Only an entry of this revision (e.g. the commit the Hugging Face cache
            names); ``None``: any revision scored before.

        Returns
        -------
        tuple or None
            ``(result, revision)`` of the newest matching entry, or ``None``.
        """
        want = make_key(identity, "", settings, endpoint=endpoint)
        folder = self.model_folder(identity, want.get("endpoint"))
        try:
            paths = sorted(folder.glob("*.json"))
        except OSError:
            return None
        best: tuple[str, dict[str, Any], str] | None = None
        for path in paths:
            entry = self._load(path)
            if entry is None:
                continue
            key = entry["key"]
            if {**key, "revision": ""} != want or path != self.path_for(key):
                continue
            if revision is not None and key["revision"] != revision:
                continue
            created = str(entry.get("created", ""))
            if best is None or created > best[0]:
                best = (created, entry["result"], str(key["revision"]))
        return None if best is None else (best[1], best[2])

    # ---- writing -------------------------------------------------------
    def put(self, key: dict[str, Any], result: dict[str, Any]) -> Path | None:
        """Store ``result`` under ``key`` atomically; returns the path, or ``None`` on failure.

        Raises
        ------
        ValueError
            If ``key`` is a hub model's without an endpoint (see :func:`make_key`).
        """
        if str(key.get("model", "")).startswith("hub:") and not key.get("endpoint"):
            raise ValueError(f"{key['model']}: a hub entry needs its endpoint in the key")
        # Plain JSON types only, as they will be read back; key order is kept (outputs list
        # fields in that order), while the checksum is over the sorted form.
        result = json.loads(json.dumps(result, allow_nan=True))
        entry = {
            "magic": _MAGIC,
            "created": datetime.now(timezone.utc).isoformat(timespec="microseconds"),
            "key": key,
            "result": result,
            "sha256": _digest({"key": key, "result": result}),
        }
        path = self.path_for(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            _write_durably(path, json.dumps(entry, indent=1, allow_nan=True) + "\n")
        except OSError as e:
            warnings.warn(f"could not write the score cache in {self.root} ({e.strerror or e}); continuing without it", CacheWarning, stacklevel=2)
            return None
        _remove_stale_temporaries(path.parent)
        return path

    def clear(self) -> int:
        """Delete every entry of every format; returns how many files were removed."""
        removed = 0
        for p in sorted((self.root / "scores").rglob("*"), reverse=True):
            with contextlib.suppress(OSError):
                if p.is_file():
                    p.unlink()
                    removed += 1
                else:
                    p.rmdir()
        return removed


_STALE_SECONDS = 3600


def _remove_stale_temporaries(folder: Path) -> None:
    """Delete temporary files left by writers that were killed (older than an hour)."""
    import time

    cutoff = time.time() - _STALE_SECONDS
    for tmp in folder.glob(".*.tmp"):
        with contextlib.suppress(OSError):
            if tmp.stat().st_mtime < cutoff:
                tmp.unlink()


def _write_durably(path: Path, text: str) -> None:
    """Atomic write with fsync, so that even a power cut leaves the old or the new file."""
    from posviz.util.atomic import atomic_path

    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
