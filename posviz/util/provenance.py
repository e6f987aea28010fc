"""What a result was made from: the SHA-256 of a file's bytes, and the installed versions of libraries.

Checkpoint manifests (:mod:`posviz.read.manifests`), the explorer's sidebar
(:mod:`posviz.explorer.provenance`) and the gallery's manifest (``scripts/gallery.py``)
all record these; one definition keeps their records comparable.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path


def file_sha256(path: str | Path) -> str:
    """SHA-256 of a file's bytes, read in 1 MiB chunks (checkpoints can be gigabytes).

    Parameters
    ----------
    path
        The file.

    Returns
    -------
    str
        The hex digest.
    """
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def installed_versions(names: Iterable[str], missing: str = "unknown") -> dict[str, str]:
    """The installed version of each distribution in ``names``.

    Parameters
    ----------
    names
        Distribution names, as pip knows them.
    missing
        What to record for one that is not installed.

    Returns
    -------
    dict
        ``{name: version}`` in the order given.
    """
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in names:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = missing
    return found
