"""What a checkpoint's bytes are, without reading them twice: content hashes of weight files and of tensors read.

Two checkpoints that serve the same weight file, or the same bytes for the tensors
read, are one checkpoint whatever their labels say. This module says what each
holds, as cheaply as the source allows:

* :func:`file_digests`: the content hash of each weight file, never downloading it.
  A Hub file's is the SHA-256 the Hub sends for LFS files (``X-Linked-Etag`` of the
  ``resolve`` answer, or the ``lfs.sha256`` of the model info with ``blobs=true``),
  kept with the slice store (:mod:`posviz.hub.slices`) and in the name of the Hugging
  Face cache's blob, so it is known offline too; a ``posviz train`` checkpoint's is
  the SHA-256 its manifest records. Plain folders have none (hashing a multi-gigabyte
  file would cost more than reading the tensors).
* :func:`tensor_digest`: a SHA-256 of tensors as read (names, shapes and values), so
  equal tensors in different files are found too.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from posviz.read.sources import Source

_HEX = re.compile(r"^[0-9a-f]{40}$|^[0-9a-f]{64}$")


def _manifest_digests(folder: Path) -> dict[str, str]:
    from posviz.read.manifests import MANIFEST

    try:
        files = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))["files"]
        return {str(k): str(v["sha256"]) for k, v in files.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def _blob_name(path: Path) -> str | None:
    """The blob a Hugging Face cache snapshot links to is named by the file's ETag (sha256 for LFS files)."""
    name = Path(os.path.realpath(path)).name
    return name if _HEX.match(name) else None


def file_digest(source: Source, filename: str, opened: Any = None) -> str | None:
    """The content hash of one weight file of ``source``, or ``None`` where none is known without hashing it.

    Parameters
    ----------
    source
        A resolved source.
    filename
        A weight file of it (a shard name for sharded checkpoints).
    opened
        The file as a :class:`~posviz.read.checkpoints.Checkpoint` opened it, if it did (its Hub reader knows
        the hash already).

    Returns
    -------
    str or None
        A hex digest: the manifest's SHA-256 for ``posviz train`` checkpoints (any folder with a manifest); for Hub
        files the Hub's content hash (LFS SHA-256), from the model info, the slice
        store, the Hugging Face cache's blob name or the ``resolve`` answer's headers
        (one ``HEAD`` at most, no body).
    """
    if source.kind != "hub":  # a posviz train checkpoint (as RUN@STEP or as its folder) has a manifest
        return _manifest_digests(source.root).get(filename) if source.kind in ("run", "dir") else None
    known = source.remote_files.get(filename)
    if known is not None and known[1]:
        return known[1]
    remote = getattr(opened, "remote", None)
    if remote is not None and getattr(remote, "etag", None):
        return str(remote.etag)
    where = source.locate(filename)
    if isinstance(where, Path):
        return _blob_name(where)
    return getattr(where, "etag", None) or None


def files_holding(source: Source, names: Iterable[str]) -> list[str]:
    """The weight files of ``source`` that hold the tensors ``names`` (the index of a sharded checkpoint says which)."""
    from posviz.errors import CheckpointError

    first = source.files[0]
    if not first.endswith(".index.json"):
        return [first]
    try:
        where = json.loads(source.fetch(first).read_text(encoding="utf-8"))["weight_map"]
        return sorted({str(where[n]) for n in names})
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"{source.label}: {first} does not say which file holds {', '.join(names)}: {e}") from None


def file_digests(source: Source, filenames: Iterable[str], opened: Mapping[str, Any] | None = None) -> dict[str, str | None]:
    """:func:`file_digest` of each of ``filenames`` (``opened``: the files already open, by name)."""
    return {f: file_digest(source, f, (opened or {}).get(f)) for f in filenames}


def tensor_digest(tensors: Mapping[str, np.ndarray]) -> str:
    """SHA-256 of tensors as read: each key, shape and float64 value, in key order.

    Keys name a tensor's role (``E_P``, ``layer 0 W_Q``), not its name in the file, so
    that a checkpoint re-saved under other tensor names still matches.
    Widening to float64 is exact for every stored float type, so equal stored
    tensors give equal digests and different ones (but for NaN payloads) differ.
    """
    import numpy as np

    h = hashlib.sha256()
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name], dtype=np.float64)
        h.update(f"{name}:{a.shape}:".encode())
        h.update(a.tobytes())
    return h.hexdigest()
