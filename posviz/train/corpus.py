"""Training text and tokenizers for ``posviz train``.

Corpus specs, in the order they are read:

* ``stdlib-docstrings[:N]``: English docstrings of the installed Python standard
  library (module, class and function docstrings of at least 40 characters, files
  in sorted order, tests and IDLE skipped; the first ``N`` only if given). Exists
  offline on every machine; deterministic for a given Python version. Cached
  (checksummed) under ``$POSVIZ_CACHE_DIR`` or ``~/.cache/posviz``.
* a text file (UTF-8; paragraphs separated by blank lines become documents);
* a folder (its ``.txt``, ``.md``, ``.rst`` and ``.text`` files, recursively, sorted);
* a Hugging Face dataset id (needs the ``datasets`` package and the Hub; the
  ``train`` split's ``text`` column), failing at once when offline.

Tokenizer: an existing one (folder, or hub id, resolved like models) or, by
default, a lower-cased BERT-style WordPiece trained on the corpus with
``tokenizers`` (:func:`train_tokenizer`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from posviz.errors import OptionError, PosvizError, SourceError

DEMO_CORPUS = "stdlib-docstrings"
TEXT_SUFFIXES = (".txt", ".md", ".rst", ".text")
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
_MIN_DOCSTRING = 40
_SKIP_DIRS = {"test", "tests", "idlelib", "site-packages", "dist-packages", "__pycache__", "turtledemo"}


class CorpusError(PosvizError):
    """The corpus cannot be read or is too small."""


def cache_dir() -> Path:
    """Folder for posviz's caches (``$POSVIZ_CACHE_DIR``, else ``$XDG_CACHE_HOME/posviz``, else ``~/.cache/posviz``)."""
    if os.environ.get("POSVIZ_CACHE_DIR"):
        return Path(os.environ["POSVIZ_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "posviz"


def _extract_docstrings(limit: int | None) -> list[str]:
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


def stdlib_docstrings(limit: int | None = None) -> list[str]:
    """Docstrings of the installed Python standard library, in a fixed order.

    Parameters
    ----------
    limit
        Return only the first ``limit`` docstrings (fast: stops parsing early).

    Notes
    -----
    The full list (about 1.6 MB of text on Python 3.11) is cached as JSON with a
    SHA-256 of its content; a damaged cache file is ignored and rebuilt.
    """
    import platform
    import sysconfig

    from posviz.util.atomic import write_text_atomic

    key = hashlib.sha256(f"{platform.python_version()}|{sysconfig.get_paths()['stdlib']}".encode()).hexdigest()[:16]
    path = cache_dir() / f"stdlib-docstrings-{key}.json"
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        body = json.dumps(doc["docs"], ensure_ascii=False)
        if hashlib.sha256(body.encode()).hexdigest() == doc["sha256"]:
            return doc["docs"][:limit] if limit is not None else doc["docs"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    if limit is not None:
        return _extract_docstrings(limit)
    docs = _extract_docstrings(None)
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
        m = re.fullmatch(rf"{DEMO_CORPUS}(?::(\d+))?", spec)
        path = Path(spec)
        if m:
            texts += stdlib_docstrings(int(m.group(1)) if m.group(1) else None)
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


# ---- tokenizer --------------------------------------------------------------------


def _wordpiece_vocab(bpe_vocab: dict[str, int]) -> dict[str, int]:
    """A WordPiece vocabulary from a BPE one whose word starts are marked with ``▁``.

    ``▁word`` becomes ``word`` and a word-internal ``piece`` becomes ``##piece``
    (what ``WordPiece.from_bpe`` does for BPE trained with the ``##`` prefix);
    every single character is added in both forms so that no word falls back to
    ``[UNK]`` for want of a first letter. Ids follow the BPE ids (merge order).
    """
    out: dict[str, int] = {}

    def add(token: str) -> None:
        if token and token not in out:
            out[token] = len(out)

    ordered = sorted(bpe_vocab, key=bpe_vocab.__getitem__)
    for token in ordered:
        if token in SPECIAL_TOKENS:
            add(token)
        elif token.startswith("▁"):
            add(token[1:])
        else:
            add("##" + token)
    for token in ordered:
        if len(token) == 1 and token != "▁" and token not in SPECIAL_TOKENS:
            add(token)
    return out


def train_tokenizer(texts: Sequence[str], vocab_size: int = 8000, model_max_length: int = 512):
    """A lower-cased WordPiece tokenizer (as BERT's) trained on ``texts``, deterministically.

    Parameters
    ----------
    texts
        Training documents.
    vocab_size
        Target size of the subword vocabulary (the result may differ by the
        characters added in both word-initial and ``##`` form).
    model_max_length
        Recorded in the tokenizer (the longest sequence the model takes).

    Returns
    -------
    transformers.PreTrainedTokenizerFast
        Normalisation and pre-tokenisation as BERT's (lower case, accents
        stripped, split at whitespace and punctuation), ``[PAD] [UNK] [CLS] [SEP]
        [MASK]`` as ids 0-4, texts wrapped as ``[CLS] ... [SEP]``.

    Notes
    -----
    ``tokenizers``' WordPiece trainer runs the BPE trainer and converts its
    vocabulary, but with the ``##`` prefix it breaks ties between equally
    frequent pairs in hash order, so two runs on the same text give different
    vocabularies. Here the BPE trainer runs on words marked with a ``▁`` start
    (its deterministic mode; a run must be reproducible from its seed) and the
    same conversion is done in :func:`_wordpiece_vocab`.
    """
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
        trainers,
    )
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE(unk_token="[UNK]"))
    bpe.normalizer = normalizers.BertNormalizer(lowercase=True)
    bpe.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Metaspace(), pre_tokenizers.Punctuation()])
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=list(SPECIAL_TOKENS), show_progress=False)
    bpe.train_from_iterator(texts, trainer=trainer)

    tok = Tokenizer(models.WordPiece(_wordpiece_vocab(bpe.get_vocab()), unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
        mask_token="[MASK]", model_max_length=model_max_length,
    )


def load_tokenizer(spec: str):
    """An existing tokenizer from a folder or hub id (packaged models resolve offline)."""
    from transformers import AutoTokenizer

    from posviz.read.sources import hub_offline, looks_like_hub_id, packaged_model_path

    path = Path(spec)
    packaged = packaged_model_path(spec) if not path.exists() else None
    where = str(path) if path.exists() else str(packaged[0]) if packaged else spec
    if not path.exists() and not packaged:
        if not looks_like_hub_id(spec):
            raise OptionError(f"tokenizer {spec} does not exist")
        if hub_offline():
            raise SourceError(f"tokenizer {spec!r} is not local and HF_HUB_OFFLINE is set", "pass a tokenizer folder, or omit --tokenizer to train one")
    try:
        tok = AutoTokenizer.from_pretrained(where)
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise SourceError(f"cannot load tokenizer {spec!r}: {first}", "pass a tokenizer folder, or omit --tokenizer to train one") from None
    missing = [name for name in ("cls_token", "sep_token", "mask_token", "pad_token") if getattr(tok, name, None) is None]
    if missing:
        raise OptionError(f"tokenizer {spec!r} has no {', '.join(missing)}", "masked-LM training needs [CLS], [SEP], [MASK] and [PAD] tokens")
    return tok


# ---- blocks -----------------------------------------------------------------------


def make_blocks(tokenizer: Any, texts: Sequence[str], seq_len: int):
    """Token blocks ``(num_blocks, seq_len)``: ``[CLS]`` + ``seq_len - 2`` tokens + ``[SEP]``.

    Documents are tokenized without special tokens and concatenated with
    ``[SEP]`` between them; the remainder shorter than a block is dropped. Every
    block starts with ``[CLS]`` at position 0 (TUPE's untie relies on it).
    """
    import numpy as np

    ids = tokenizer(list(texts), add_special_tokens=False, verbose=False)["input_ids"]
    sep, cls = tokenizer.sep_token_id, tokenizer.cls_token_id
    lengths = np.array([len(x) + 1 for x in ids], dtype=np.int64)
    stream = np.empty(int(lengths.sum()), dtype=np.int64)
    pos = 0
    for x in ids:
        stream[pos : pos + len(x)] = x
        stream[pos + len(x)] = sep
        pos += len(x) + 1
    body = seq_len - 2
    count = len(stream) // body
    blocks = np.empty((count, seq_len), dtype=np.int64)
    blocks[:, 0] = cls
    blocks[:, 1:-1] = stream[: count * body].reshape(count, body)
    blocks[:, -1] = sep
    return blocks
