"""A small Hub file (``config.json``) fetched with one request into the Hugging Face cache, as huggingface_hub lays it out.

``hf_hub_download`` asks for a file's metadata (one ``HEAD``) before it downloads it
(one ``GET``). When the model info was just asked for, the commit is known, so one
``GET`` of ``resolve/COMMIT/FILE`` is enough: its ``ETag`` names the blob. The file
is then written where huggingface_hub would put it (``blobs/ETAG``, a relative link
``snapshots/COMMIT/FILE`` to it, or a copy where links are not allowed, and
``refs/REVISION`` naming the commit), so that ``try_to_load_from_cache``, offline
runs and ``transformers`` find it as if huggingface_hub had fetched it. Anything
unexpected returns ``None`` and the caller falls back to ``hf_hub_download``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

_ETAG = re.compile(r"^[0-9a-f]{40}$|^[0-9a-f]{64}$")
_MAX_BYTES = 10 * 2**20  # configs are kilobytes; anything larger goes through huggingface_hub


def fetch_small_file(repo_id: str, filename: str, commit: str, revision: str | None, endpoint: str,
                     cache_dir: str) -> Path | None:
    """``filename`` of ``repo_id`` at ``commit`` in the Hugging Face cache, fetched with one ``GET`` if missing.

    Parameters
    ----------
    repo_id, filename
        The file.
    commit
        The 40-hex commit the model info named.
    revision
        The branch or tag asked for (``None``: ``main``); ``refs/REVISION`` is written to name ``commit``.
    endpoint, cache_dir
        The Hub endpoint and the Hugging Face hub cache folder.

    Returns
    -------
    Path or None
        The snapshot path, or ``None`` when the answer was not a plain file with a content ETag.
    """
    from huggingface_hub import get_session, hf_hub_url
    from huggingface_hub.file_download import repo_folder_name
    from huggingface_hub.utils import build_hf_headers

    from posviz.util.atomic import atomic_path

    storage = Path(cache_dir) / repo_folder_name(repo_id=repo_id, repo_type="model")
    pointer = storage / "snapshots" / commit / filename
    if not pointer.is_file():
        url = hf_hub_url(repo_id, filename, revision=commit, endpoint=endpoint)
        try:
            r = get_session().get(url, headers=build_hf_headers(), timeout=10)
        except Exception:  # network errors: huggingface_hub's download names them properly
            return None
        etag = (r.headers.get("X-Linked-Etag") or r.headers.get("ETag") or "").strip().removeprefix("W/").strip('"')
        if r.status_code != 200 or not _ETAG.match(etag) or len(r.content) > _MAX_BYTES:
            return None
        blob = storage / "blobs" / etag
        blob.parent.mkdir(parents=True, exist_ok=True)
        if not blob.is_file():
            with atomic_path(blob) as tmp:
                tmp.write_bytes(r.content)
        pointer.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.symlink(os.path.relpath(blob, pointer.parent), pointer)
        except FileExistsError:
            pass
        except OSError:  # no symbolic links here (as huggingface_hub does then: a copy)
            with atomic_path(pointer) as tmp:
                tmp.write_bytes(r.content)
    ref = storage / "refs" / (revision or "main")
    if revision != commit and (not ref.is_file() or ref.read_text(encoding="utf-8").strip() != commit):
        ref.parent.mkdir(parents=True, exist_ok=True)  # a branch name may hold "/"
        with atomic_path(ref) as tmp:
            tmp.write_text(commit, encoding="utf-8")
    return pointer
