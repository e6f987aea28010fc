"""Where posviz keeps files of its own: the user cache folder, one definition for every cache.

:func:`check_folder` refuses an output folder that could never be created (:func:`file_in_the_way`).

The score cache (:mod:`posviz.scoring.cache`) and the offline demo corpus
(:mod:`posviz.train.corpus`) both live under :func:`cache_dir`, so one setting
(``POSVIZ_CACHE_DIR``) moves or isolates all of them (see ARCHITECTURE.md).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def cache_dir(*parts: str) -> Path:
    """The posviz cache folder, or a path inside it.

    Parameters
    ----------
    *parts
        Path components joined under the cache folder (none: the folder itself).

    Returns
    -------
    Path
        ``$POSVIZ_CACHE_DIR`` if set; otherwise ``$XDG_CACHE_HOME/posviz``;
        otherwise the platform's user cache folder: ``~/.cache/posviz`` on Linux,
        ``~/Library/Caches/posviz`` on macOS, ``%LOCALAPPDATA%\\posviz\\Cache``
        on Windows. A leading ``~`` in either variable is expanded. Nothing is
        created.

    Examples
    --------
    >>> cache_dir("scores")  # doctest: +SKIP
    PosixPath('/home/me/.cache/posviz/scores')
    """
    return _root().joinpath(*parts)


def _root() -> Path:
    if os.environ.get("POSVIZ_CACHE_DIR"):
        return Path(os.environ["POSVIZ_CACHE_DIR"]).expanduser()
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "posviz"
    home = Path.home()
    if sys.platform == "darwin":
        return home / "Library" / "Caches" / "posviz"
    if sys.platform == "win32":
        return Path(os.environ.get("LOCALAPPDATA", home / "AppData" / "Local")) / "posviz" / "Cache"
    return home / ".cache" / "posviz"


def check_folder(path: str | os.PathLike, what: str) -> None:
    """Raise a one-line error if ``path`` cannot be a folder: it, or the nearest of its parents that exists, is a file.

    Parameters
    ----------
    path
        The folder an output will be written to (it need not exist).
    what
        How the message names it, e.g. ``"--out"``.

    Raises
    ------
    OptionError
        ``path`` or an existing parent is not a folder.
    """
    from posviz.errors import OptionError

    blocker = file_in_the_way(path)
    if blocker is not None:
        raise OptionError(f"{what} {path} cannot be a folder: {blocker} is a file", f"give a folder with {what}")


def file_in_the_way(path: str | os.PathLike) -> Path | None:
    """The file that keeps ``path`` from being a folder (``path`` itself or the nearest existing parent), or ``None``."""
    path = Path(path)
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    return existing if existing is not None and not existing.is_dir() else None
