"""Write output files atomically: a crash or Ctrl-C never leaves a half-written file."""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from posviz.errors import OptionError
from posviz.util.paths import file_in_the_way

# Errors of the file system rather than of posviz: reported as one line, not a traceback.
_WRITE_ERRNOS = {errno.ENOSPC, errno.EACCES, errno.EPERM, errno.EROFS, errno.EDQUOT, errno.EIO, errno.EISDIR}


def check_output_path(path: str | os.PathLike, allowed: tuple[str, ...]) -> Path:
    """Validate an output path before any work is done.

    Parameters
    ----------
    path
        Where the output will be written.
    allowed
        Allowed extensions, lower case with the dot (``(".png", ".pdf")``).

    Returns
    -------
    Path
        The path, unchanged.

    Raises
    ------
    OptionError
        If the extension is not allowed, the path is a directory, or its folder
        does not exist or cannot be written to.
    """
    p = Path(path)
    if p.is_dir():
        raise OptionError(f"output path {p} is a directory", "give a file name such as out.png")
    ext = p.suffix.lower()
    if ext not in allowed:
        raise OptionError(
            f"unknown output extension {ext or '(none)'!r} for {p}",
            f"use one of {', '.join(allowed)}",
        )
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        blocker = file_in_the_way(parent)
        if blocker is not None:
            raise OptionError(f"output folder {parent} cannot be created: {blocker} is a file", "write the output elsewhere")
        raise OptionError(f"output folder {parent} does not exist", "create it first")
    if not os.access(parent, os.W_OK):
        raise OptionError(f"output folder {parent} is not writable")
    if p.exists() and not os.access(p, os.W_OK):
        raise OptionError(f"output file {p} exists and is not writable")
    return p


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``target``; rename it onto ``target`` on success.

    On any exception (KeyboardInterrupt included) the temporary file is removed and
    an existing ``target`` is left untouched.

    Examples
    --------
    >>> with atomic_path("fig.png") as tmp:          # doctest: +SKIP
    ...     figure.savefig(tmp, format="png")
    """
    target = Path(target)
    try:
        fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent or ".")
    except OSError as e:
        raise OptionError(f"cannot write to {target.parent}: {e.strerror or e}") from None
    os.close(fd)
    tmp = Path(name)
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600 files; outputs get the usual mode
    try:
        yield tmp
        os.replace(tmp, target)
    except BaseException as e:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        if isinstance(e, OSError) and e.errno in _WRITE_ERRNOS:
            raise OptionError(f"cannot write {target}: {e.strerror}", "the previous file, if any, is unchanged") from None
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text_atomic(target: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``target`` atomically (UTF-8)."""
    with atomic_path(target) as tmp:
        tmp.write_text(text, encoding="utf-8")
