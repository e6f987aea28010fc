"""Score many models, each read at most once, and say up front which cannot be had.

For every model, a score comes from the first of:

1. the posviz score cache, for the exact revision found locally (hub commit in the
   Hugging Face cache, local files' sizes and times, package version);
2. the checkpoint itself (local path, packaged model, or Hugging Face cache), after
   which the score is stored in the score cache;
3. the score cache, for a hub model that is no longer in the Hugging Face cache (no
   network needed): only entries from the same Hub endpoint (``HF_ENDPOINT``), and
   of the commit the Hugging Face cache still names for the id (``refs/main``, or
   the ``@revision`` given) when it names one; otherwise the newest such entry;
4. the Hub: only ``config.json`` and the one weight file holding the position table
   are downloaded (huggingface_hub shows a progress bar).

:func:`plan_scores` decides this for all models before any work is done, so that an
offline run with missing checkpoints fails at once with one line naming all of them
(:class:`MissingModelsError`) instead of after scoring half of them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from posviz.errors import SourceError
from posviz.scoring.cache import ScoreCache, ScoreSettings, current_endpoint, source_key
from posviz.util.endpoints import is_default_endpoint

How = Literal["synthetic", "local", "hf-cache", "score-cache", "download"]


class MissingModelsError(SourceError):
    """Some models are in neither cache and the Hub cannot be used.

    Parameters
    ----------
    missing
        The models, as given.
    reason
        Why the Hub cannot be used (``HF_HUB_OFFLINE is set``, ...).
    alternative
        What else the user can do, appended to the hint.
    """

    def __init__(self, missing: Sequence[str], reason: str, *, alternative: str | None = "pass a local path") -> None:
        self.missing = list(missing)
        self.reason = reason
        where = "not in the local Hugging Face cache or the posviz score cache"
        if len(self.missing) == 1:
            message = f"{self.missing[0]}: {where}, and {reason}"
        else:
            message = f"{len(self.missing)} models are {where}, and {reason}: {', '.join(self.missing)}"
        hint = "run once online to download them, config.json and one weight file each"
        if reason.startswith("HF_HUB_OFFLINE"):
            hint = "unset HF_HUB_OFFLINE and " + hint
        if alternative:
            hint += f", or {alternative}"
        super().__init__(message, hint)


@dataclass
class ModelRequest:
    """One model to score.

    Attributes
    ----------
    spec
        What to resolve (path, hub id ``org/name[@rev]``, synthetic spec); hub
        downloads use this id.
    aliases
        Other hub ids of the same repository, also looked up in both caches
        (e.g. the legacy ``albert-base-v2`` for ``albert/albert-base-v2``).
    """

    spec: str
    aliases: tuple[str, ...] = ()

    @property
    def ids(self) -> tuple[str, ...]:
        """``spec`` and its aliases."""
        return (self.spec, *self.aliases)


@dataclass
class Plan:
    """Where one model's score will come from (see the module docstring)."""

    request: ModelRequest
    how: How
    source: Any = None
    cached: dict[str, Any] | None = None
    cached_revision: str | None = None

    def __str__(self) -> str:  # shown in the progress bar
        return self.request.spec


@dataclass
class ScoredModels:
    """Result of :func:`score_models`.

    Attributes
    ----------
    rows
        One score row per available model, in request order (a
        :meth:`~posviz.scoring.model.ModelScore.to_dict` dict plus ``score_cache``:
        ``hit``, ``stored`` or ``off``).
    requests
        The request of each row.
    missing
        Requests skipped because they could not be had (only with ``allow_missing``).
    missing_reason
        Why they could not be had.
    """

    rows: list[dict[str, Any]] = field(default_factory=list)
    requests: list[ModelRequest] = field(default_factory=list)
    missing: list[ModelRequest] = field(default_factory=list)
    missing_reason: str | None = None


def _is_hub_spec(spec: str) -> bool:
    from posviz.read.sources import looks_like_hub_id, packaged_model_path

    if Path(spec).expanduser().exists() or not looks_like_hub_id(spec) or spec.startswith((".", "/", "~")):
        return False
    repo_id, _, revision = spec.partition("@")
    return bool(revision) or packaged_model_path(repo_id) is None


_COMMIT = re.compile(r"[0-9a-f]{40}")


def cached_commit(repo_id: str, revision: str | None = None) -> str | None:
    """The commit a hub revision stands for, as far as the local Hugging Face cache knows.

    Parameters
    ----------
    repo_id
        Hub id ``org/name``.
    revision
        Branch, tag or commit hash; ``None`` for ``main``.

    Returns
    -------
    str or None
        ``revision`` itself if it is a full commit hash; else the commit that the
        cache's ``refs/<revision>`` names (written by every download, and kept when
        the files themselves are gone); else ``None``. Never touches the network.
    """
    if revision and _COMMIT.fullmatch(revision):
        return revision
    from huggingface_hub.file_download import repo_folder_name

    from posviz.read.sources import hf_cache_dir

    try:
        ref = Path(hf_cache_dir()) / repo_folder_name(repo_id=repo_id, repo_type="model") / "refs" / (revision or "main")
        text = ref.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return text if _COMMIT.fullmatch(text) else None


def hub_provenance(repo_id: str, commit: str | None, endpoint: str) -> str:
    """The ``source`` of a hub model's score row: ``hub org/name@commit``, plus the endpoint unless it is the Hub's."""
    where = "" if is_default_endpoint(endpoint) else f" from {endpoint}"
    return f"hub {repo_id}@{commit or 'unknown'}{where}"


def _cached_score(cache: ScoreCache, ids: Sequence[str], settings: ScoreSettings) -> dict[str, Any] | None:
    """A cached score row of a hub model (``ids``: its spec and aliases) from this endpoint, or ``None``.

    If the Hugging Face cache names the commit of any of the ids (or a full commit
    hash is given), only that commit's entry is taken; a ``@revision`` it cannot
    resolve matches nothing. The row's provenance is the entry's key, not what the
    stored row says.
    """
    endpoint = current_endpoint()
    specs = [(repo_id, revision) for repo_id, _, revision in (i.partition("@") for i in ids)]
    known = next((c for c in (cached_commit(r, rev or None) for r, rev in specs) if c is not None), None)
    if known is None and any(rev for _, rev in specs):
        return None
    for repo_id, _ in specs:
        hit = cache.latest(f"hub:{repo_id}", settings, endpoint=endpoint, revision=known)
        if hit is not None:
            result, commit = hit
            return {**result, "source": hub_provenance(repo_id, commit, endpoint), "revision": commit}
    return None


def plan_scores(requests: Iterable[ModelRequest], settings: ScoreSettings, cache: ScoreCache | None) -> list[Plan]:
    """Decide, without reading weights or touching the network, where each score comes from.

    Local paths are resolved here, so a bad path fails before any work is done.
    """
    from posviz.read.embeddings import is_synthetic
    from posviz.read.sources import cached_hub_source, resolve_source

    plans = []
    for req in requests:
        if is_synthetic(req.spec):
            plans.append(Plan(req, "synthetic"))
            continue
        if not _is_hub_spec(req.spec):
            plans.append(Plan(req, "local", resolve_source(req.spec)))
            continue
        source = next((s for s in map(cached_hub_source, req.ids) if s is not None), None)
        if source is not None:
            plans.append(Plan(req, "hf-cache", source))
            continue
        hit = None if cache is None else _cached_score(cache, req.ids, settings)
        if hit is not None:
            plans.append(Plan(req, "score-cache", cached=hit, cached_revision=hit["revision"]))
        else:
            plans.append(Plan(req, "download"))
    return plans


#: ``on_read(request, source, embeddings)``: called with every position table read to score a model (not for
#: scores from the cache), from the worker thread that read it; e.g. to fingerprint a series' checkpoints as they pass.
OnRead = Callable[[ModelRequest, Any, Any], None]


def _compute(source_or_spec, settings: ScoreSettings, on_read: OnRead | None = None,
             request: ModelRequest | None = None) -> dict[str, Any]:
    from posviz.read.embeddings import load_position_embeddings
    from posviz.scoring.model import score_model

    pe = load_position_embeddings(source_or_spec, table=settings.table, positions=settings.positions)
    if on_read is not None and request is not None and not isinstance(source_or_spec, str):
        on_read(request, source_or_spec, pe)
    return score_model(pe, normalize=settings.normalize, null_draws=settings.null_draws, seed=settings.seed).to_dict()


def _provenance(source) -> dict[str, Any]:
    """``model``, ``source`` and ``revision`` of a row scored from ``source`` (naming a non-default endpoint)."""
    described = hub_provenance(source.repo_id, source.revision, current_endpoint()) if source.kind == "hub" else source.describe()
    return {"model": source.label, "source": described, "revision": source.revision}


def run_plan(plan: Plan, settings: ScoreSettings, cache: ScoreCache | None, on_read: OnRead | None = None) -> dict[str, Any]:
    """The score row of one planned model (reading or filling the score cache; ``on_read``: see :data:`OnRead`)."""
    from posviz.read.sources import resolve_source

    if plan.how == "synthetic":
        return {**_compute(plan.request.spec, settings), "score_cache": "off"}
    if plan.how == "score-cache":
        assert plan.cached is not None
        return {**plan.cached, "score_cache": "hit"}
    source = plan.source if plan.source is not None else resolve_source(plan.request.spec)
    provenance = _provenance(source)
    if cache is None:
        return {**_compute(source, settings, on_read, plan.request), **provenance, "score_cache": "off"}
    key = source_key(source, settings)
    hit = cache.get(key)
    if hit is not None:
        # The key is the weights, not the spelling: provenance comes from this source, not the one stored first.
        return {**hit, **provenance, "score_cache": "hit"}
    row = {**_compute(source, settings, on_read, plan.request), **provenance}
    cache.put(key, row)
    return {**row, "score_cache": "stored"}


def score_models(
    requests: Sequence[ModelRequest],
    settings: ScoreSettings,
    *,
    cache: ScoreCache | None = None,
    allow_missing: bool = False,
    missing_alternative: str | None = "pass a local path",
    partial_alternative: str | None = None,
    progress_label: str | None = "scoring",
    on_read: OnRead | None = None,
) -> ScoredModels:
    """Score every request, reading each checkpoint only when no cached score fits.

    Parameters
    ----------
    requests
        Models to score.
    settings
        Normalisation, null baseline, positions and table.
    cache
        Score cache, or ``None`` to bypass it (nothing read or written).
    allow_missing
        Skip hub models that are in neither cache while the Hub cannot be used,
        instead of raising.
    missing_alternative
        Alternative offered in the hint of :class:`MissingModelsError`.
    partial_alternative
        Alternative offered instead when some of the models are available
        (e.g. going on without the others).
    progress_label
        Text of the progress bar shown on stderr for several models (``None``: no bar).
    on_read
        Called with every position table read (:data:`OnRead`).

    Raises
    ------
    MissingModelsError
        If models need downloading while the Hub cannot be used (offline), naming
        all of them, before any model is scored (unless ``allow_missing``).
    """
    from posviz.read.sources import hub_unavailable_reason
    from posviz.util.progress import progress

    plans = plan_scores(requests, settings, cache)
    out = ScoredModels()
    downloads = [p for p in plans if p.how == "download"]
    if downloads:
        reason = hub_unavailable_reason()
        if reason is not None:
            if not allow_missing:
                some_available = len(downloads) < len(plans)
                alternative = partial_alternative if some_available and partial_alternative else missing_alternative
                raise MissingModelsError([p.request.spec for p in downloads], reason, alternative=alternative)
            out.missing = [p.request for p in downloads]
            out.missing_reason = reason
            plans = [p for p in plans if p.how != "download"]
    workers = fetch_workers()
    if workers > 1 and sum(p.how == "download" for p in plans) > 1:
        rows = _run_concurrently(plans, settings, cache, workers, progress_label, on_read)
    else:
        rows = (run_plan(plan, settings, cache, on_read) for plan in (progress(plans, progress_label) if progress_label else plans))
    for plan, row in zip(plans, rows, strict=True):
        out.rows.append(row)
        out.requests.append(plan.request)
    return out


#: Models fetched at once from the Hub (``POSVIZ_FETCH_WORKERS``; 1: one after the other).
DEFAULT_FETCH_WORKERS = 16


def fetch_workers() -> int:
    """How many models are fetched and scored at once (``POSVIZ_FETCH_WORKERS``, default 16, at least 1)."""
    import os

    try:
        return max(1, int(os.environ.get("POSVIZ_FETCH_WORKERS", DEFAULT_FETCH_WORKERS)))
    except ValueError:
        return DEFAULT_FETCH_WORKERS


def _run_concurrently(plans: list[Plan], settings: ScoreSettings, cache: ScoreCache | None, workers: int,
                      progress_label: str | None, on_read: OnRead | None = None) -> Iterator[dict[str, Any]]:
    """Rows of ``plans`` in order, computed by a small pool of threads.

    A Hub series is bound by round trips (config, header and tensor ranges per checkpoint), so several
    checkpoints are fetched at once over the pool's connections; numpy releases the GIL while scoring.
    One bar counts the models; the per-file byte bars stay off in the workers. The first error stops
    the rest (pending models are cancelled) and is raised as it would be sequentially.
    """
    from concurrent.futures import ThreadPoolExecutor

    from posviz.util.progress import progress, quiet_bytes

    def work(plan: Plan) -> dict[str, Any]:
        with quiet_bytes():
            return run_plan(plan, settings, cache, on_read)

    pool = ThreadPoolExecutor(max_workers=min(workers, len(plans)), thread_name_prefix="posviz-fetch")
    try:
        futures = [pool.submit(work, plan) for plan in plans]
        order = progress(plans, progress_label) if progress_label else plans
        for i, _ in enumerate(order):
            yield futures[i].result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
