"""A local emulator of the Hugging Face Hub's HTTP API, for tests and benchmarks.

It serves model folders under hub ids, each under one or more revisions
(branches; ``main`` unless told), with the routes huggingface_hub uses to resolve
and download files: ``/api/models/{repo}[/revision/{rev}]`` (model info with
``sha`` and ``siblings``, with ``?blobs=true`` each file's size, blob id and LFS SHA-256; ``{rev}`` a branch
or a commit), ``/api/models/{repo}/tree/{rev}`` (the same per file), ``HEAD``/``GET /{repo}/resolve/{rev}/{file}``
(``ETag``, ``X-Repo-Commit``, ``Content-Length``, ``Accept-Ranges``, and
``Range`` answered with ``206``), and the endpoint root that posviz probes.
Every request and every body byte sent is counted, a bandwidth cap and a per-request latency can be set,
LFS-style redirects to a CDN address can be switched on (``cdn``),
fault switches let tests play a server that ignores ``Range``, an expiring CDN address, a file that
changes under the reader, or a connection dropped mid-range, and :meth:`HubEmulator.serve_as` plants
a wrong checkpoint in a series (a branch serving another branch's files, or one shard of them).

From a script::

    from tests.hub_emulator import HubEmulator

    hub = HubEmulator(rate=50e6)          # cap: 50 MB/s (None: no cap)
    hub.add("org/model", "path/to/folder")
    hub.add("org/model", "path/to/older", revision="step_20k")  # another branch
    hub.start()                           # os.environ["HF_ENDPOINT"] = hub.endpoint
    ...
    print(hub.bytes_sent, hub.ranges("org/model", "model.safetensors"))
    hub.stop()

or ``python -m tests.hub_emulator ROOT [--port P] [--rate BYTES_PER_S]`` to serve
every ``ROOT/org/name`` folder (holding ``config.json``) as ``org/name``, and every
``ROOT/org/name@REV`` folder as branch ``REV`` of ``org/name``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse

_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")
_CHUNK = 64 * 1024


#: Files larger than this get an ETag from their size, modification time and sampled bytes instead of a hash
#: of every byte (benchmarks serve sparse files of a 70B model's full size; reading them whole would take minutes).
HASH_LIMIT = 512 * 2**20


def _content_tag(path: Path, limit: int = HASH_LIMIT) -> str:
    """The file's ETag: sha256 of its bytes, or for files over ``limit`` of its size, mtime and first and last MiB."""
    size = path.stat().st_size
    if size <= limit:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    h = hashlib.sha256(f"{size}:{path.stat().st_mtime_ns}".encode())
    with open(path, "rb") as f:
        h.update(f.read(2**20))
        f.seek(size - 2**20)
        h.update(f.read(2**20))
    return h.hexdigest()


@dataclass
class Request:
    """One request the emulator answered."""

    method: str
    path: str
    range: str | None
    status: int = 0
    sent: int = 0  # body bytes
    span: tuple[int, int] | None = None  # byte range of the file sent (stop exclusive)
    repo_id: str | None = None
    filename: str | None = None
    authorized: bool = False  # the request carried an Authorization header


@dataclass
class Faults:
    """Switches that make the emulator misbehave (all off by default)."""

    ignore_range: bool = False  # answer Range requests with 200 and the whole file
    change_etag: bool = False  # a different ETag on every file response
    drop_ranges: int = 0  # drop this many ranged responses halfway (then answer normally)
    expire_cdn: bool = False  # each CDN address the Hub redirects to serves one request, then answers 403 (expired)
    extra: dict = field(default_factory=dict)


class HubEmulator:
    """Serve model folders under hub ids; count requests and bytes.

    Parameters
    ----------
    rate
        Bandwidth cap for response bodies in bytes per second, shared by all
        connections (``None``: as fast as possible).
    port
        Port on 127.0.0.1 (0: any free port).
    latency
        Seconds each request waits before it is answered (a round trip to a distant server; 0: none).
    """

    def __init__(self, rate: float | None = None, port: int = 0, latency: float = 0.0) -> None:
        self.latency = latency
        self.hash_limit = HASH_LIMIT  # files above this size get a cheap ETag (see _content_tag)
        #: As the real Hub serves LFS files: ``resolve`` answers weight files with a 302 to a CDN address on
        #: another host name (``localhost`` instead of ``127.0.0.1``, the same server), ``X-Linked-Etag`` and
        #: ``X-Linked-Size`` on the redirect, and the CDN's own ETag on the file.
        self.cdn = False
        #: When set to N, each weight-file request waits (up to 10 s) until N requests have been in flight at once; the
        #: counters say whether a client ever had N requests open (``max_active``), without timing guesses.
        self.rendezvous = 0
        self.active = 0
        self.max_active = 0
        self._met = threading.Condition()
        self.repos: dict[str, dict[str, dict]] = {}  # repo id -> revision (branch) -> {sha, files, etags}
        self.gated: set[str] = set()
        self.requests: list[Request] = []
        self.faults = Faults()
        self.rate = rate
        self._lock = threading.Lock()
        self._next_free = 0.0  # when the capped link is free again
        self._etag_counter = 0
        self._used_tokens: set[str] = set()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the real Hub

            def log_message(self, *args) -> None:  # keep test output quiet
                pass

            def do_HEAD(self) -> None:
                hub._handle(self, body=False)

            def do_GET(self) -> None:
                hub._handle(self, body=True)

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread: threading.Thread | None = None

    # ---- serving -------------------------------------------------------------
    def add(self, repo_id: str, folder: str | Path, revision: str = "main") -> str:
        """Serve every file of ``folder`` as ``repo_id`` at branch ``revision``; returns the commit hash.

        Adding several revisions of one repo serves each under its own branch name
        and commit; adding one again replaces it.
        """
        files = {p.name: p for p in sorted(Path(folder).iterdir()) if p.is_file()}
        digest = hashlib.sha1(repo_id.encode() + (b"" if revision == "main" else b"@" + revision.encode()))
        etags = {}
        for name, p in files.items():
            h = _content_tag(p, self.hash_limit)
            etags[name] = h
            digest.update(name.encode() + h.encode())
        sha = digest.hexdigest()
        self.repos.setdefault(repo_id, {})[revision] = {"sha": sha, "files": files, "etags": etags}
        return sha

    def serve_as(self, repo_id: str, revision: str, other: str, files: list[str] | None = None) -> str:
        """Plant a wrong checkpoint: branch ``revision`` serves ``other``'s bytes (all files, or only ``files``).

        The branch keeps its own name and gets its own commit, as when an upload put one step's files under
        another step's label (a whole checkpoint, or one shard of it). Returns the new commit hash.
        """
        mine = self.repos[repo_id].get(revision, {"files": {}, "etags": {}})
        theirs = self.repos[repo_id][other]
        names = list(theirs["files"]) if files is None else files
        served = {**mine["files"], **{n: theirs["files"][n] for n in names}}
        etags = {**mine["etags"], **{n: theirs["etags"][n] for n in names}}
        digest = hashlib.sha1(f"{repo_id}@{revision} serves {other}".encode())
        for name in sorted(served):
            digest.update(name.encode() + etags[name].encode())
        sha = digest.hexdigest()
        self.repos[repo_id][revision] = {"sha": sha, "files": served, "etags": etags}
        return sha

    def _revision(self, repo_id: str, revision: str | None) -> dict | None:
        """The files of ``repo_id`` at a branch name or commit hash (``None``: main)."""
        branches = self.repos.get(repo_id, {})
        revision = revision or "main"
        return branches.get(revision) or next((b for b in branches.values() if b["sha"] == revision), None)

    def start(self) -> HubEmulator:
        """Serve in a background thread; returns ``self``."""
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> HubEmulator:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---- what was asked for --------------------------------------------------
    @property
    def bytes_sent(self) -> int:
        """Body bytes sent so far, all requests together."""
        return sum(r.sent for r in self.requests)

    def file_bytes(self, repo_id: str, filename: str | None = None) -> int:
        """Body bytes sent for files of ``repo_id`` (or one of them)."""
        return sum(r.sent for r in self._file_requests(repo_id, filename))

    def downloads(self, repo_id: str) -> list[str]:
        """File names fetched with GET for ``repo_id`` (once per request)."""
        return [r.filename for r in self._file_requests(repo_id, None)]

    def ranges(self, repo_id: str, filename: str) -> list[tuple[int, int]]:
        """Byte spans of ``filename`` sent by GET requests, in order (stop exclusive)."""
        return [r.span for r in self._file_requests(repo_id, filename) if r.span is not None]

    def reset(self) -> None:
        """Forget the requests seen so far."""
        self.requests.clear()

    def _file_requests(self, repo_id: str, filename: str | None) -> list[Request]:
        return [r for r in self.requests if r.method == "GET" and r.repo_id == repo_id and r.filename is not None
                and (filename is None or r.filename == filename)]

    # ---- handlers ------------------------------------------------------------
    def _throttle(self, n: int) -> None:
        if not self.rate:
            return
        with self._lock:
            now = time.monotonic()
            start = max(now, self._next_free)
            self._next_free = start + n / self.rate
            wait = self._next_free - now
        time.sleep(max(wait, 0.0))

    def _send(self, h, req: Request, status: int, data: bytes = b"", headers: dict | None = None, body: bool = True) -> None:
        req.status = status
        h.send_response(status)
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        if body and data:
            h.wfile.write(data)
            req.sent += len(data)

    def _handle(self, h, body: bool) -> None:
        raw = urlparse(h.path).path  # split before unquoting: a revision may hold an escaped "/"
        path = unquote(raw)
        req = Request(h.command, path, h.headers.get("Range"), authorized="Authorization" in h.headers)
        with self._lock:
            self.requests.append(req)
        if self.latency:
            time.sleep(self.latency)
        with self._met:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
            self._met.notify_all()
            if self.rendezvous and "/resolve/" in raw and raw.endswith((".safetensors", ".bin")):
                self._met.wait_for(lambda: self.max_active >= self.rendezvous, timeout=10)
        try:
            self._route(h, req, raw, path, body)
        finally:
            with self._met:
                self.active -= 1

    def _route(self, h, req: Request, raw: str, path: str, body: bool) -> None:
        if path in ("", "/"):
            return self._send(h, req, 200, b"ok", body=body)
        if raw.startswith("/api/models/") and "/tree/" in raw:
            repo_id, _, revision = raw[len("/api/models/"):].partition("/tree/")
            return self._tree(h, req, unquote(repo_id), unquote(revision).rstrip("/") or None, body)
        if raw.startswith("/api/models/"):
            repo_id, _, revision = raw[len("/api/models/"):].partition("/revision/")
            blobs = "blobs=true" in urlparse(h.path).query.lower()
            return self._model_info(h, req, unquote(repo_id).rstrip("/"), unquote(revision) or None, body, blobs)
        if raw.startswith("/cdn/"):  # /cdn/{repo with --}/{sha}/{file}[?t=TOKEN]
            repo, sha, filename = (unquote(x) for x in raw[len("/cdn/"):].split("/", 2))
            req.repo_id, req.filename = repo.replace("--", "/"), filename
            token = urlparse(h.path).query
            if self.faults.expire_cdn and token:
                with self._lock:
                    used = token in self._used_tokens
                    self._used_tokens.add(token)
                if used:
                    return self._send(h, req, 403, b"expired", body=body)
            return self._file(h, req, req.repo_id, sha, filename, body, cdn=True)
        if "/resolve/" in raw:
            repo_id, _, tail = raw.lstrip("/").partition("/resolve/")
            revision, _, filename = tail.partition("/")
            req.repo_id, req.filename = unquote(repo_id), unquote(filename)
            return self._file(h, req, req.repo_id, unquote(revision), req.filename, body)
        return self._send(h, req, 404, b"not found", body=body)

    def _missing(self, h, req: Request, repo_id: str, body: bool, revision: str | None = None) -> bool:
        if repo_id in self.gated:
            self._send(h, req, 403, b'{"error":"gated"}', {"X-Error-Code": "GatedRepo", "X-Error-Message": "gated"}, body)
            return True
        if repo_id not in self.repos:
            headers = {"X-Error-Code": "RepoNotFound", "X-Error-Message": "Repository not found"}
            self._send(h, req, 404, b'{"error":"Repository not found"}', headers, body)
            return True
        if self._revision(repo_id, revision) is None:
            headers = {"X-Error-Code": "RevisionNotFound", "X-Error-Message": f"Invalid rev id: {revision or 'main'}"}
            self._send(h, req, 404, b'{"error":"Invalid rev id"}', headers, body)
            return True
        return False

    def _file_meta(self, repo: dict, name: str) -> dict:
        """What the Hub says of a file with ``blobs=true`` or in the tree API: size, blob id, LFS SHA-256 of weights."""
        size = repo["files"][name].stat().st_size
        meta = {"size": size, "blobId": repo["etags"][name]}
        if name.endswith((".safetensors", ".bin")):  # stored with LFS: the content hash is the file's SHA-256
            meta["blobId"] = hashlib.sha1(f"pointer {repo['etags'][name]}".encode()).hexdigest()
            meta["lfs"] = {"sha256": repo["etags"][name], "size": size, "pointerSize": 134}
        return meta

    def _tree(self, h, req: Request, repo_id: str, revision: str | None, body: bool) -> None:
        """``/api/models/{repo}/tree/{rev}``: the files of a revision with their sizes and content hashes."""
        if self._missing(h, req, repo_id, body, revision):
            return
        repo = self._revision(repo_id, revision)
        entries = []
        for name in repo["files"]:
            meta = self._file_meta(repo, name)
            entries.append({"type": "file", "path": name, "size": meta["size"], "oid": meta["blobId"],
                            **({"lfs": {"oid": meta["lfs"]["sha256"], "size": meta["size"], "pointerSize": 134}}
                               if "lfs" in meta else {})})
        self._send(h, req, 200, json.dumps(entries).encode(), {"Content-Type": "application/json"}, body)

    def _model_info(self, h, req: Request, repo_id: str, revision: str | None, body: bool, blobs: bool = False) -> None:
        if self._missing(h, req, repo_id, body, revision):
            return
        repo = self._revision(repo_id, revision)
        siblings = [{"rfilename": f, **(self._file_meta(repo, f) if blobs else {"size": p.stat().st_size})}
                    for f, p in repo["files"].items()]
        info = {"id": repo_id, "modelId": repo_id, "sha": repo["sha"], "siblings": siblings, "private": False}
        self._send(h, req, 200, json.dumps(info).encode(), {"Content-Type": "application/json"}, body)

    def _etag(self, repo: dict, filename: str) -> str:
        if self.faults.change_etag:
            with self._lock:
                self._etag_counter += 1
                return f'"changed-{self._etag_counter}"'
        return f'"{repo["etags"][filename]}"'

    def _file(self, h, req: Request, repo_id: str, revision: str, filename: str, body: bool, cdn: bool = False) -> None:
        if self._missing(h, req, repo_id, body, revision):
            return
        repo = self._revision(repo_id, revision)
        path = repo["files"].get(filename)
        if path is None:
            headers = {"X-Error-Code": "EntryNotFound", "X-Error-Message": "Entry not found"}
            return self._send(h, req, 404, b"", headers, body)
        size = path.stat().st_size
        if self.cdn and not cdn and filename.endswith((".safetensors", ".bin")):
            port = self._server.server_address[1]
            where = f"http://localhost:{port}/cdn/{repo_id.replace('/', '--')}/{repo['sha']}/{filename}"
            if self.faults.expire_cdn:  # a signed address, good for one request
                with self._lock:
                    self._etag_counter += 1
                    where += f"?t={self._etag_counter}"
            headers = {"Location": where, "X-Repo-Commit": repo["sha"], "X-Linked-Etag": self._etag(repo, filename),
                       "X-Linked-Size": str(size), "ETag": '"pointer-' + repo["etags"][filename][:12] + '"'}
            return self._send(h, req, 302, b"", headers, body)
        etag = '"cdn-' + repo["etags"][filename][:24] + '"' if cdn else self._etag(repo, filename)
        headers = {"ETag": etag, "Accept-Ranges": "bytes", "Content-Type": "application/octet-stream"}
        if not cdn:
            headers["X-Repo-Commit"] = repo["sha"]
        start, stop, status = 0, size, 200
        m = _RANGE.match(req.range or "")
        if m and not self.faults.ignore_range and (m.group(1) or m.group(2)):
            if m.group(1):
                start = int(m.group(1))
                stop = min(int(m.group(2)) + 1, size) if m.group(2) else size
            else:  # bytes=-N: the last N bytes
                start = max(size - int(m.group(2)), 0)
            if start >= size or start >= stop:
                headers["Content-Range"] = f"bytes */{size}"
                return self._send(h, req, 416, b"", headers, body)
            status = 206
            headers["Content-Range"] = f"bytes {start}-{stop - 1}/{size}"
        self._stream(h, req, path, status, headers, start, stop, body)

    def _stream(self, h, req: Request, path: Path, status: int, headers: dict, start: int, stop: int, body: bool) -> None:
        req.status = status
        h.send_response(status)
        for k, v in headers.items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(stop - start))
        h.end_headers()
        if not body:
            return
        drop = False
        if status == 206 and self.faults.drop_ranges > 0:
            with self._lock:
                drop, self.faults.drop_ranges = True, self.faults.drop_ranges - 1
        req.span = (start, stop)
        end = start + (stop - start) // 2 if drop else stop
        with open(path, "rb") as f:
            f.seek(start)
            pos = start
            while pos < end:
                chunk = f.read(min(_CHUNK, end - pos))
                if not chunk:
                    break
                self._throttle(len(chunk))
                try:
                    h.wfile.write(chunk)
                except OSError:  # the client went away
                    h.close_connection = True
                    return
                pos += len(chunk)
                req.sent += len(chunk)
        if drop:
            req.span = (start, pos)
            h.wfile.flush()
            h.close_connection = True
            h.connection.close()


def main(argv: list[str] | None = None) -> None:
    """Serve ``ROOT/org/name`` (and ``ROOT/org/name@REV``) folders until interrupted."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--rate", type=float, default=None, help="bandwidth cap in bytes/s")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds each request waits before its answer")
    args = parser.parse_args(argv)
    hub = HubEmulator(rate=args.rate, port=args.port, latency=args.latency)
    for cfg in sorted(args.root.glob("*/*/config.json")):
        name, _, revision = cfg.parent.name.partition("@")
        hub.add(f"{cfg.parent.parent.name}/{name}", cfg.parent, revision=revision or "main")
    with hub:
        print(f"HF_ENDPOINT={hub.endpoint}  ({len(hub.repos)} repos)", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
