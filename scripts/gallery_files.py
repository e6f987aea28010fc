"""Where the gallery's files are: the repository, its reports, and the files git tracks (as committed, or in the work
tree), with their SHA-256 (see ``scripts/gallery.py``)."""

from __future__ import annotations

import glob
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPORTS = "reports"
MANIFEST = f"{REPORTS}/MANIFEST.json"
BIN = Path(sys.executable).parent


def sha256(path: Path) -> str:
    """SHA-256 of a file's bytes."""
    from posviz.util.provenance import file_sha256

    return file_sha256(path)


def expand(patterns: Sequence[str], root: Path = ROOT) -> list[str]:
    """Repository-relative paths under ``root`` matching ``patterns`` (files only, sorted, without the manifest).

    In a git checkout only files that git tracks or would track count: a scratch folder that .gitignore
    keeps out (``runs/``, ``demo/``, a script's models) is neither a shipped file nor a dependency. A committed
    tree (:func:`committed_root`) holds tracked files only.
    """
    found: set[str] = set()
    for pattern in patterns:
        for p in glob.glob(str(root / pattern), recursive=True):
            rel = Path(p).relative_to(root).as_posix()
            if Path(p).is_file() and rel != MANIFEST and "__pycache__" not in rel:
                found.add(rel)
    ignored = _ignored(found) if root == ROOT else set()
    return sorted(found - ignored)


_COMMITTED: dict[str, Path] = {}


def committed_root(rev: str = "HEAD") -> Path:
    """The repository's files as committed at ``rev``, exported once per process into a scratch folder.

    Outside a git checkout (an unpacked source archive) the work tree is all there is: ``ROOT``.
    """
    if not (ROOT / ".git").exists():
        return ROOT
    if rev not in _COMMITTED:
        import atexit
        import io
        import shutil
        import tarfile
        import tempfile

        folder = Path(tempfile.mkdtemp(prefix="posviz-gallery-committed-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        archive = subprocess.run(["git", "archive", "--format=tar", rev], cwd=ROOT, capture_output=True, check=True).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(folder, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        _COMMITTED[rev] = folder
    return _COMMITTED[rev]


def _ignored(paths: set[str]) -> set[str]:
    """The paths among ``paths`` that .gitignore excludes (none outside a git checkout)."""
    if not paths or not (ROOT / ".git").exists():
        return set()
    r = subprocess.run(["git", "check-ignore", "--no-index", "--stdin"], cwd=ROOT, input="\n".join(sorted(paths)),
                       capture_output=True, text=True)
    return set(r.stdout.splitlines())
