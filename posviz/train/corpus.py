"""Training text for ``posviz train``: corpus specs read into a list of documents.

Corpus specs, in the order they are read:

* ``cpython-3.11.7-docstrings[:N]`` (:data:`DEMO_CORPUS`, the default): the docstrings
  of the CPython 3.11.7 standard library, frozen in the package
  (``posviz/train/corpora/``, Python Software Foundation License). The same bytes on
  every machine and every Python; the first ``N`` documents only if given.
* ``stdlib-docstrings[:N]``: the same extraction from the *installed* Python's
  standard library (module, class and function docstrings of at least 40
  characters, files in sorted order, tests and IDLE skipped). **Machine-dependent:**
  it changes with the Python version and with what a distribution packages (Debian's
  3.11.2 gives 6,034 documents, CPython 3.11.7 6,681). Cached (checksummed) in the
  posviz cache folder (:func:`posviz.util.paths.cache_dir`).
* a text file (UTF-8; paragraphs separated by blank lines become documents);
* a folder (its ``.txt``, ``.md``, ``.rst`` and ``.text`` files, recursively, sorted);
* a Hugging Face dataset id (needs the ``datasets`` package and the Hub; the
  ``train`` split's ``text`` column), failing at once when offline.

Every result made from a corpus records what it read, by content
(:func:`corpus_identity`: the SHA-256 of the documents, their number and size), and
refuses to be extended from a corpus with another hash (:func:`check_same_corpus`).

The tokenizer is in :mod:`posviz.train.tokenizer`; see ARCHITECTURE.md for the
whole training data flow.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from posviz.errors import PosvizError
from posviz.util.paths import cache_dir


class PackagedCorpus(NamedTuple):
    """A corpus frozen in the package: a gzipped JSON list of documents and the SHA-256 of that JSON."""

    file: str
    sha256: str
    documents: int


#: The default corpus of training, probes and attention statistics: the same bytes everywhere.
DEMO_CORPUS = "cpython-3.11.7-docstrings"
#: The installed Python's docstrings: machine-dependent (kept as a named option).
MACHINE_CORPUS = "stdlib-docstrings"
#: Corpora shipped in ``posviz/train/corpora/`` (made by ``scripts/freeze_docstrings.py``).
PACKAGED = {
    DEMO_CORPUS: PackagedCorpus(
        "cpython-3.11.7-docstrings.json.gz", "a467c50c688caaed23a434db6b7ed0cc90d40603fd02cad8755509f46834b6aa", 6681
    ),
}
_CORPORA_DIR = Path(__file__).with_name("corpora")
TEXT_SUFFIXES = (".txt", ".md", ".rst", ".text")
_MIN_DOCSTRING = 40
_SKIP_DIRS = {"test", "tests", "idlelib", "site-packages", "dist-packages", "__pycache__", "turtledemo"}


class CorpusError(PosvizError):
    """The corpus cannot be read or is too small."""


def extract_docstrings(limit: int | None = None) -> list[str]:
    """Docstrings of the running Python's standard library, parsed afresh (no cache).

    The extraction behind :data:`MACHINE_CORPUS` and, run under CPython 3.11.7, behind
    the frozen :data:`DEMO_CORPUS` (``scripts/freeze_docstrings.py``).
    """
    import ast
    import sysconfig
    import warnings

    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.rglob("*.py") if not _SKIP_DIRS.intersection(p.relative_to(root).parts))
    docs: list[str] = []
    for path in files:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # SyntaxWarnings of old escape sequences
                tree = ast.parse(path.read_bytes(), filename=str(path))
        except (SyntaxError, ValueError, OSError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc and len(doc) >= _MIN_DOCSTRING:
                    docs.append(doc)
                    if limit is not None and len(docs) >= limit:
                        return docs
    return docs


def corpus_json(texts: Sequence[str]) -> bytes:
    """The canonical bytes of a list of documents: a JSON array, UTF-8, non-ASCII kept as is.

    :func:`corpus_identity` hashes these bytes, and a packaged corpus file is exactly
    them, gzipped.
    """
    return json.dumps(list(texts), ensure_ascii=False).encode("utf-8")


def corpus_identity(texts: Sequence[str]) -> dict[str, Any]:
    """What a result records about the text it was made from.

    Returns
    -------
    dict
        ``corpus_sha256`` (SHA-256 of :func:`corpus_json`), ``corpus_documents``
        (number of documents) and ``corpus_bytes`` (size of that JSON in bytes).
    """
    body = corpus_json(texts)
    return {"corpus_sha256": hashlib.sha256(body).hexdigest(), "corpus_documents": len(texts), "corpus_bytes": len(body)}


def check_same_corpus(recorded: Mapping[str, Any], identity: Mapping[str, Any], what: str) -> None:
    """Refuse to extend a result made from other text (its ``corpus_sha256`` differs).

    A record without a ``corpus_sha256`` on either side (made before hashes were
    recorded, or by a task that reads no corpus) passes; the caller's other checks
    (a run's data fingerprint, the settings) still apply.

    Parameters
    ----------
    recorded
        The stored record (``run.json``, ``experiment.json``, a result file).
    identity
        :func:`corpus_identity` of the corpus given now.
    what
        What is being extended, for the message (``"the run runs/abs"``).

    Raises
    ------
    PosvizError
        The hashes differ.
    """
    before, now = recorded.get("corpus_sha256"), identity.get("corpus_sha256")
    if before is not None and now is not None and before != now:
        raise PosvizError(
            f"{what} was made from corpus sha256 {before[:12]}…, not the {now[:12]}… given now",
            "pass the corpus it was made from (its run.json or experiment.json names it), or start afresh in another folder",
        )


def packaged_corpus(name: str, limit: int | None = None) -> list[str]:
    """The documents of a corpus frozen in the package, checked against its recorded SHA-256.

    Parameters
    ----------
    name
        A key of :data:`PACKAGED`.
    limit
        Return only the first ``limit`` documents.

    Raises
    ------
    CorpusError
        The file is missing or damaged (the installation is broken).
    """
    import gzip

    spec = PACKAGED[name]
    try:
        body = gzip.decompress((_CORPORA_DIR / spec.file).read_bytes())
    except (OSError, EOFError) as e:
        raise CorpusError(f"the packaged corpus {name} cannot be read: {e}", "reinstall posviz") from None
    if hashlib.sha256(body).hexdigest() != spec.sha256:
        raise CorpusError(f"the packaged corpus {name} is damaged (its SHA-256 differs)", "reinstall posviz")
    docs = json.loads(body)
    return docs[:limit] if limit is not None else docs


def docstrings_cache_file() -> Path:
    """Where :func:`stdlib_docstrings` caches its list: one file per Python version and standard library."""
    import platform
    import sysconfig

    key = hashlib.sha256(f"{platform.python_version()}|{sysconfig.get_paths()['stdlib']}".encode()).hexdigest()[:16]
    return cache_dir(f"stdlib-docstrings-{key}.json")


def stdlib_docstrings(limit: int | None = None) -> list[str]:
    """Docstrings of the installed Python standard library, in a fixed order (machine-dependent).

    For the same text on every machine use :func:`packaged_corpus` (:data:`DEMO_CORPUS`).

    Parameters
    ----------
    limit
        Return only the first ``limit`` docstrings (fast: stops parsing early).

    Notes
    -----
    The full list (about 1.6 MB of text on Python 3.11) is cached as JSON with a
    SHA-256 of its content; a damaged cache file is ignored and rebuilt.
    """
    from posviz.util.atomic import write_text_atomic

    path = docstrings_cache_file()
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        body = json.dumps(doc["docs"], ensure_ascii=False)
        if hashlib.sha256(body.encode()).hexdigest() == doc["sha256"]:
            return doc["docs"][:limit] if limit is not None else doc["docs"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    if limit is not None:
        return extract_docstrings(limit)
    docs = extract_docstrings(None)
    body = json.dumps(docs, ensure_ascii=False)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps({"sha256": hashlib.sha256(body.encode()).hexdigest(), "docs": docs}, ensure_ascii=False))
    except OSError:
        pass  # a read-only home only costs the parse next time
    return docs


def _read_text_file(path: Path) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise CorpusError(f"corpus file {path} is not UTF-8 text") from None
    except OSError as e:
        raise CorpusError(f"cannot read corpus file {path}: {e.strerror or e}") from None
    return [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]


def _hub_dataset(spec: str) -> list[str]:
    from posviz.read.sources import hub_offline, looks_like_hub_id

    if not looks_like_hub_id(spec):
        raise CorpusError(f"corpus {spec!r} is not a file, a folder or a dataset id", f"use a text file, a folder of .txt files or {DEMO_CORPUS}")
    if hub_offline():
        raise CorpusError(
            f"corpus {spec!r} is not a local file or folder, and HF_HUB_OFFLINE is set so it cannot be loaded as a Hugging Face dataset",
            f"pass text files or folders, or the offline demo corpus {DEMO_CORPUS}",
        )
    try:
        import datasets
    except ImportError:
        raise CorpusError(
            f"corpus {spec!r} is not a local file or folder; loading Hugging Face datasets needs the `datasets` package",
            "pip install datasets, or pass text files or folders",
        ) from None
    try:
        from huggingface_hub import dataset_info

        dataset_info(spec, timeout=10)  # fail fast when the Hub is unreachable or the id is wrong
        ds = datasets.load_dataset(spec, split="train")
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CorpusError(f"cannot load dataset {spec!r}: {first}", f"check the id and the network, or use {DEMO_CORPUS}") from None
    column = "text" if "text" in ds.column_names else next((c for c, f in ds.features.items() if getattr(f, "dtype", "") == "string"), None)
    if column is None:
        raise CorpusError(f"dataset {spec!r} has no text column")
    return [t for t in ds[column] if isinstance(t, str) and t.strip()]


def load_corpus(specs: Sequence[str]) -> list[str]:
    """Documents (strings) of every corpus spec, in order.

    Raises
    ------
    CorpusError
        Missing or unreadable files, empty folders, unreachable datasets, or no text.
    """
    if not specs:
        raise CorpusError("give at least one --corpus", f"for example --corpus {DEMO_CORPUS} or --corpus my-texts/")
    texts: list[str] = []
    for spec in specs:
        named = re.fullmatch(r"(.+?)(?::(\d+))?", spec)
        name, limit = named.group(1), int(named.group(2)) if named.group(2) else None
        path = Path(spec)
        if name in PACKAGED:
            texts += packaged_corpus(name, limit)
        elif name == MACHINE_CORPUS:
            texts += stdlib_docstrings(limit)
        elif path.is_file():
            texts += _read_text_file(path)
        elif path.is_dir():
            files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES)
            if not files:
                raise CorpusError(f"corpus folder {path} has no {', '.join(TEXT_SUFFIXES)} files")
            for f in files:
                texts += _read_text_file(f)
        elif path.exists():
            raise CorpusError(f"corpus {spec} is neither a regular file nor a folder")
        elif spec.startswith((".", "/", "~")) or spec.count("/") > 1 or path.suffix.lower() in TEXT_SUFFIXES:
            raise CorpusError(f"corpus path {spec} does not exist")
        else:
            texts += _hub_dataset(spec)
    if not texts:
        raise CorpusError("the corpus holds no text")
    return texts
