"""A weight file on the Hub, read by HTTP byte ranges through huggingface_hub's HTTP session.

Only the ranges asked for are fetched (``Range: bytes=A-B``), with the request
headers huggingface_hub builds (auth token, user agent) against the endpoint of
:func:`~posviz.read.sources.hub_endpoint`. What was fetched is kept in memory
until :meth:`HubFile.commit` (called once the bytes were decoded without error)
writes it to the slice store (:mod:`posviz.hub.slices`), from which offline
reruns are served.

Safety checks: every response must carry the ETag of the first one (a file that
changes under the reader is an error), ``Content-Range`` must match what was
asked, and a connection dropped mid-range is retried once. A server that
ignores ``Range`` (``200`` with the whole body) is detected: the body is
streamed to a file once and every later read is served from it.

Round trips: the size and content hash come from the model info when the source
was resolved on the Hub (no ``HEAD``); the first range of an LFS file follows the
Hub's redirect to its CDN, and later ranges go straight to that address (without
the Hub's credentials; back through the Hub if it is refused). Files with one
content hash (revisions that serve the same blob) share what was fetched of them,
in the process and, through the slice store, across processes: each range once.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from posviz.errors import SourceError
from posviz.hub.errors import hub_error
from posviz.hub.slices import SliceStore

_TIMEOUT = 30.0
_CHUNK = 1 << 20

#: Settings of the command line (``--full-download``, ``-v``), reset by each command.
_settings = {"full_download": False, "verbose": False}


def configure(full_download: bool = False, verbose: bool = False) -> None:
    """Set ``--full-download`` and ``-v`` for this process, and forget earlier fetch statistics."""
    _settings.update(full_download=full_download, verbose=verbose)
    STATS.clear()


def full_download_wanted() -> bool:
    """True with ``--full-download`` or ``POSVIZ_FULL_DOWNLOAD=1``: whole files into the HF cache, as before."""
    env = os.environ.get("POSVIZ_FULL_DOWNLOAD", "").strip().upper() in {"1", "ON", "YES", "TRUE"}
    return bool(_settings["full_download"]) or env


def verbose() -> bool:
    """True with ``-v``."""
    return bool(_settings["verbose"])


@dataclass
class FetchStats:
    """Bytes fetched from one Hub file in this process."""

    filename: str
    size: int
    fetched: int = 0
    ranges: int = 0

    def summary(self) -> str:
        """``fetched 3.1 MiB of 258.0 MiB (2 ranges, model.safetensors)``."""
        if not self.ranges:
            return f"fetched nothing of {_mib(self.size)} ({self.filename}: all read from the slice store)"
        return f"fetched {_mib(self.fetched)} of {_mib(self.size)} ({self.ranges} range{'s' * (self.ranges != 1)}, {self.filename})"


#: One entry per Hub file (``repo/filename``) read by ranges in this process.
STATS: dict[str, FetchStats] = {}


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**17 else f"{n / 1024:.1f} KiB"


def _norm_etag(etag: str | None) -> str | None:
    if not etag:
        return None
    etag = etag.strip()
    return (etag[2:] if etag.startswith("W/") else etag).strip('"')


class HubFile:
    """Byte ranges of one file of a Hub commit, from the slice store or the network.

    Parameters
    ----------
    repo_id, commit, filename
        The file (``commit``: the 40-hex commit hash the source was resolved to).
    endpoint
        The Hub endpoint.
    offline
        Serve only what the slice store holds (``HF_HUB_OFFLINE``, or the Hub unreachable).
    known
        The file's size and content hash (LFS SHA-256, else git blob id) from the model info this process
        just asked for: no ``HEAD`` is needed.

    Raises
    ------
    SourceError
        Offline and nothing stored for this file; or the Hub's own errors (gated, missing).
    """

    def __init__(self, repo_id: str, commit: str, filename: str, endpoint: str, offline: bool,
                 known: tuple[int, str] | None = None) -> None:
        self.repo_id, self.commit_hash, self.filename, self.endpoint = repo_id, commit, filename, endpoint
        self.offline = offline
        self.label = f"{repo_id}/{filename}"
        self._pending: list[tuple[int, int, bytes | Path]] = []
        self._whole: Path | None = None  # the whole body, when the server ignored Range
        self._transport_etag: str | None = None
        self._cdn_url: str | None = None  # where the Hub redirected the first range (LFS files)
        from huggingface_hub import hf_hub_url

        self.url = hf_hub_url(repo_id, filename, revision=commit, endpoint=endpoint)
        store = SliceStore.find(endpoint, repo_id, commit, filename)
        meta = store.meta() if store else None
        self._headed = False
        if store is not None and meta is not None:  # known already: the network only for ranges not stored
            self.size, self.etag, self.store = int(meta["size"]), str(meta["etag"]), store
        elif offline:
            raise SourceError(f"{repo_id}: {filename} is neither in the local Hugging Face cache nor in the posviz slice store, "
                              "and the Hub cannot be used", "run once online to fetch the needed tensors")
        else:
            if known is not None and known[1]:  # size and content hash from this process's model info: no HEAD needed
                self.size, self.etag, self._headed = int(known[0]), _norm_etag(known[1]) or "", True
            else:
                self._head()
            self.store = SliceStore.for_file(endpoint, repo_id, commit, filename, self.etag)
        self._has_meta = meta is not None
        self._stored = self.store.slices()
        self._shared = _shared(endpoint, repo_id, filename, self.etag, self.size, self.store)
        self.stats = STATS.setdefault(self.label, FetchStats(filename, self.size))

    def _head(self) -> None:
        import inspect

        from huggingface_hub import get_hf_file_metadata

        # ``endpoint=`` came with huggingface_hub 0.26; the URL names the endpoint anyway.
        extra = {"endpoint": self.endpoint} if "endpoint" in inspect.signature(get_hf_file_metadata).parameters else {}
        try:
            meta = get_hf_file_metadata(self.url, **extra)
        except Exception as e:
            raise hub_error(self.repo_id, e) from None
        if meta.size is None or meta.etag is None:
            raise SourceError(f"{self.label}: the Hub gave no size or ETag for the file")
        size, etag = int(meta.size), _norm_etag(str(meta.etag)) or ""
        if self._headed is False and hasattr(self, "etag") and (size, etag) != (self.size, self.etag):
            raise SourceError(f"{self.label} changed on the Hub since its slices were stored (ETag {self.etag} → {etag})",
                              f"remove the folder {self.store.folder} and run again")
        self.size, self.etag, self._headed = size, etag, True

    # ---- reading ---------------------------------------------------------------
    def read(self, start: int, stop: int) -> bytes:
        """Bytes ``[start, stop)`` of the file (clipped to its end)."""
        start, stop = max(start, 0), min(stop, self.size)
        if stop <= start:
            return b""
        if self._whole is not None:
            return _read_path(self._whole, start, stop)
        pieces = self._pieces()
        if not _gaps(pieces, start, stop):
            return _assemble(pieces, start, stop)
        # Files of one content (revisions that serve the same blob) fetch each range once: one at a time.
        with self._shared.lock:
            pieces = self._pieces()
            for a, b in _gaps(pieces, start, stop):
                if self.offline:
                    raise SourceError(f"{self.label}: bytes {a}-{b} were never fetched and the Hub cannot be used",
                                      "run once online (the slice store keeps only what was read)")
                if not self._headed:
                    self._head()
                data = self._fetch(a, b)
                if self._whole is not None:
                    return _read_path(self._whole, start, stop)
                self._pending.append((a, b, data))
                self._shared.pieces.append((a, b, data))
                pieces = self._pieces()
        return _assemble(pieces, start, stop)

    def _pieces(self) -> list[tuple[int, int, bytes | Path]]:
        return sorted(self._stored + self._pending + self._shared.pieces, key=lambda p: (p[0], -p[1]))

    def commit(self) -> None:
        """Write what was fetched to the slice store (call once it decoded without error)."""
        if self.offline or (not self._pending and self._has_meta):
            return
        # Written even when every range came from another commit of the same content (its slices are found by
        # content hash), so that this commit's file is known offline.
        meta = {"size": self.size, "etag": self.etag, "commit": self.commit_hash, "filename": self.filename,
                "repo_id": self.repo_id, "endpoint": self.endpoint}
        committed = self._pending
        self.store.write(meta, committed)
        self._has_meta = True
        if self._whole is not None and any(p[2] is self._whole for p in committed):
            self._whole = self.store.folder / f"{0:012x}-{self.size:012x}"
        self._pending = []
        self._stored = self.store.slices()
        done = {id(p[2]) for p in committed}
        with self._shared.lock:  # the other files of this content read the stored copies from now on
            self._shared.pieces[:] = [(a, b, self.store.folder / f"{a:012x}-{b:012x}") if id(data) in done else (a, b, data)
                                      for a, b, data in self._shared.pieces]

    # ---- the network ----------------------------------------------------------
    def _fetch(self, start: int, stop: int) -> bytes:
        from posviz.util.progress import byte_progress

        last: Exception | None = None
        for _ in range(2):  # a dropped connection is retried once
            try:
                with byte_progress(stop - start, self.filename) as advance:
                    return self._get(start, stop, advance)
            except SourceError:
                raise
            except Exception as e:  # network errors of requests or httpx, short bodies
                last = e
        raise SourceError(f"{self.label}: the connection dropped while fetching bytes {start}-{stop} (tried twice): "
                          f"{type(last).__name__}", "check the network and run again")

    def _get(self, start: int, stop: int, advance) -> bytes:
        from huggingface_hub import get_session
        from huggingface_hub.utils import build_hf_headers

        wanted = {"Range": f"bytes={start}-{stop - 1}", "Accept-Encoding": "identity"}
        # Later ranges go straight to where the first one was redirected (the CDN), without the Hub's
        # credentials, saving a round trip each; if that address is refused (expired), back to the Hub once.
        cdn = self._cdn_url
        headers = wanted if cdn else build_hf_headers(headers=wanted)
        with _stream(get_session(), cdn or self.url, headers) as (status, rheaders, chunks, final):
            if status >= 400 and cdn:
                self._cdn_url = None
                raise ConnectionError(f"the CDN address answered HTTP {status}")  # retried through the Hub
            if status >= 400:
                raise SourceError(f"{self.label}: the Hub answered HTTP {status} to a range request")
            if status == 206 and not cdn and final and final != self.url and not _same_host(final, self.endpoint):
                self._cdn_url = final
            self._check_etag(rheaders.get("ETag"))
            self.stats.ranges += 1
            if status == 200:  # Range ignored: keep the whole body, once, on disk
                self._whole = self._save_whole(chunks, advance)
                self._pending.append((0, self.size, self._whole))
                return b""
            if status != 206:
                raise SourceError(f"{self.label}: unexpected HTTP {status} to a range request")
            expected = f"bytes {start}-{stop - 1}/{self.size}"
            if rheaders.get("Content-Range", "").strip() != expected:
                raise SourceError(f"{self.label}: the Hub answered a range request with {rheaders.get('Content-Range')!r}, not {expected!r}")
            buf = bytearray()
            for chunk in chunks:
                buf += chunk
                self.stats.fetched += len(chunk)
                advance(len(chunk))
            if len(buf) != stop - start:
                raise ConnectionError(f"short body: {len(buf)} of {stop - start} bytes")
            return bytes(buf)

    def _check_etag(self, etag: str | None) -> None:
        etag = _norm_etag(etag)
        if etag is None:
            return
        expected = self._transport_etag or self.etag
        if etag != expected and (self._transport_etag is not None or not _same_host(self.url, self.endpoint)):
            raise SourceError(f"{self.label} changed on the Hub while it was being read (ETag {expected} → {etag})",
                              "run again")
        if self._transport_etag is None:
            self._transport_etag = etag

    def _save_whole(self, chunks, advance) -> Path:
        self.store.folder.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=".whole.", suffix=".tmp", dir=self.store.folder)
        path = Path(name)
        _TEMPS.append(path)
        n = 0
        with os.fdopen(fd, "wb") as out:
            for chunk in chunks:
                out.write(chunk)
                n += len(chunk)
                self.stats.fetched += len(chunk)
                advance(len(chunk))
        if n != self.size:
            raise ConnectionError(f"short body: {n} of {self.size} bytes")
        print(f"posviz: the Hub ignored a range request for {self.label}; downloaded the whole file ({_mib(n)})", file=sys.stderr)
        return path


@dataclass
class _Content:
    """Ranges fetched in this process (or stored by earlier ones) of one file content, whatever its commit."""

    lock: Any
    pieces: list[tuple[int, int, bytes | Path]]


#: One entry per (store, endpoint, repo, filename, content hash, size): revisions serving the same blob share it.
_CONTENTS: dict[tuple[str, str, str, str, str, int], _Content] = {}
_CONTENTS_LOCK = threading.Lock()


def _shared(endpoint: str, repo_id: str, filename: str, etag: str, size: int, store: SliceStore) -> _Content:
    """The shared ranges of a file's content; on first use, those other commits of the repo stored for it."""
    key = (str(store.folder.parent.parent), endpoint, repo_id, filename, etag, size)  # the store's root: one cache, one entry
    with _CONTENTS_LOCK:
        found = _CONTENTS.get(key)
        if found is None:
            pieces = [p for other in SliceStore.same_content(endpoint, repo_id, filename, etag)
                      if other.folder != store.folder for p in other.slices()] if etag else []
            found = _CONTENTS[key] = _Content(threading.Lock(), pieces)
        else:  # stored copies removed since (a cleared cache): fetched again when needed
            with found.lock:
                found.pieces[:] = [p for p in found.pieces if not isinstance(p[2], Path) or p[2].is_file()]
        return found


#: Temporary whole-file bodies not (yet) moved into the store, removed at exit.
_TEMPS: list[Path] = []


def _cleanup() -> None:
    for p in _TEMPS:
        with contextlib.suppress(OSError):
            p.unlink()


atexit.register(_cleanup)


def _same_host(url: str, endpoint: str) -> bool:
    from urllib.parse import urlparse

    return urlparse(url).netloc == urlparse(endpoint).netloc


@contextlib.contextmanager
def _stream(session: Any, url: str, headers: dict[str, str]):
    """``(status, headers, chunk iterator, final URL)`` of a streamed GET: httpx (huggingface_hub ≥ 1) or requests (0.x)."""
    if callable(getattr(session, "stream", None)):  # httpx.Client (requests.Session.stream is a flag)
        with session.stream("GET", url, headers=headers, timeout=_TIMEOUT, follow_redirects=True) as r:
            yield r.status_code, r.headers, r.iter_bytes(_CHUNK), str(r.url)
    else:  # requests.Session
        r = session.get(url, headers=headers, timeout=_TIMEOUT, stream=True, allow_redirects=True)
        try:
            yield r.status_code, r.headers, r.iter_content(_CHUNK), str(r.url)
        finally:
            r.close()


def _read_path(path: Path, start: int, stop: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(start)
        return f.read(stop - start)


def _gaps(pieces: list[tuple[int, int, Any]], start: int, stop: int) -> list[tuple[int, int]]:
    """Parts of ``[start, stop)`` that no piece covers."""
    gaps, pos = [], start
    for a, b, _ in pieces:
        if b <= pos or a >= stop:
            continue
        if a > pos:
            gaps.append((pos, a))
        pos = max(pos, b)
        if pos >= stop:
            break
    if pos < stop:
        gaps.append((pos, stop))
    return gaps


def _assemble(pieces: list[tuple[int, int, bytes | Path]], start: int, stop: int) -> bytes:
    out, pos = bytearray(), start
    for a, b, data in sorted(pieces, key=lambda p: (p[0], -p[1])):
        if b <= pos or a > pos:
            continue
        end = min(b, stop)
        out += _piece(data, a, pos, end)
        pos = end
        if pos >= stop:
            break
    if pos < stop:  # cannot happen after _gaps; guard against a bug turning into wrong numbers
        raise SourceError(f"bytes {pos}-{stop} missing from the slice store")
    return bytes(out)


def _piece(data: bytes | Path, a: int, pos: int, end: int) -> bytes:
    if isinstance(data, Path):
        return _read_path(data, pos - a, end - a)
    return data[pos - a : end - a]
