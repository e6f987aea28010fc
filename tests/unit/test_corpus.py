"""Corpus loading, the offline demo corpus, the tokenizer and token blocks."""

from __future__ import annotations

import json

import numpy as np
import pytest

from posviz.train.corpus import DEMO_CORPUS, CorpusError, load_corpus, packaged_corpus, stdlib_docstrings
from posviz.train.data import make_blocks
from posviz.train.tokenizer import train_tokenizer


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("POSVIZ_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_stdlib_docstrings_are_english_and_deterministic(cache):
    import ast
    import sysconfig
    from pathlib import Path

    docs = stdlib_docstrings(30)
    assert docs == stdlib_docstrings(30)
    assert len(docs) == 30 and all(len(d) >= 40 for d in docs)
    # independent check: the first docstring is the first long one of the first stdlib file, in sorted order
    root = Path(sysconfig.get_paths()["stdlib"])
    first = sorted(root.glob("*.py"))[0]
    module_doc = ast.get_docstring(ast.parse(first.read_bytes()))
    assert module_doc is None or len(module_doc) < 40 or docs[0] == module_doc
    assert sum(" the " in d for d in docs) > 10


def test_docstring_cache_is_used_only_when_its_checksum_matches(cache):
    import hashlib

    fake = ["cached docstring number one, long enough to count", "and a second one, also long enough to count"]
    body = json.dumps(fake, ensure_ascii=False)
    cache.mkdir(parents=True)
    stdlib_docstrings(1)  # computes the cache key path without writing (limited reads do not cache)
    assert not list(cache.glob("*.json"))
    import platform
    import sysconfig

    key = hashlib.sha256(f"{platform.python_version()}|{sysconfig.get_paths()['stdlib']}".encode()).hexdigest()[:16]
    path = cache / f"stdlib-docstrings-{key}.json"
    path.write_text(json.dumps({"sha256": hashlib.sha256(body.encode()).hexdigest(), "docs": fake}))
    assert stdlib_docstrings() == fake
    assert stdlib_docstrings(1) == fake[:1]
    path.write_text(json.dumps({"sha256": "0" * 64, "docs": fake}))  # damaged: ignored
    assert stdlib_docstrings(2) != fake


def test_corpus_from_files_and_folders(tmp_path):
    (tmp_path / "a.txt").write_text("First paragraph.\n\nSecond\nparagraph.\n")
    sub = tmp_path / "more"
    sub.mkdir()
    (sub / "b.md").write_text("Third.")
    (sub / "skip.bin").write_bytes(b"\x00\x01")
    assert load_corpus([str(tmp_path / "a.txt")]) == ["First paragraph.", "Second\nparagraph."]
    assert load_corpus([str(tmp_path)]) == ["First paragraph.", "Second\nparagraph.", "Third."]


@pytest.mark.parametrize(
    ("make", "fragment"),
    [
        (lambda p: str(p / "missing.txt"), "does not exist"),
        (lambda p: (p / "bin.txt").write_bytes(b"\xff\xfe\x00bad") and str(p / "bin.txt"), "not UTF-8"),
        (lambda p: (p / "empty").mkdir() or str(p / "empty"), "has no .txt"),
        (lambda p: "someone/some-dataset", "HF_HUB_OFFLINE"),
    ],
)
def test_corpus_errors(tmp_path, monkeypatch, make, fragment):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(CorpusError, match=fragment):
        load_corpus([make(tmp_path)])


def test_tokenizer_training_is_deterministic_and_has_special_tokens():
    texts = packaged_corpus(DEMO_CORPUS, 120)
    a, b = train_tokenizer(texts, 600), train_tokenizer(texts, 600)
    assert a.get_vocab() == b.get_vocab()
    assert [a.convert_tokens_to_ids(t) for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")] == [0, 1, 2, 3, 4]
    enc = a("Return the sum of x.")["input_ids"]
    assert enc[0] == a.cls_token_id and enc[-1] == a.sep_token_id
    assert a.decode(enc, skip_special_tokens=True) == "return the sum of x."


def test_trained_tokenizer_is_a_bert_style_wordpiece():
    import json

    texts = packaged_corpus(DEMO_CORPUS, 300)
    tok = train_tokenizer(texts, 1000)
    spec = json.loads(tok.backend_tokenizer.to_str())
    assert spec["model"]["type"] == "WordPiece" and spec["pre_tokenizer"]["type"] == "BertPreTokenizer"
    pieces = tok.tokenize("Zyxomatic")
    assert len(pieces) > 1 and pieces[0].startswith("z") and all(p.startswith("##") for p in pieces[1:])
    # no character of the corpus is unknown: every letter exists word-initially and as ##letter
    ids = [i for t in texts for i in tok.encode(t, add_special_tokens=False)]
    assert tok.unk_token_id not in ids


def test_tokenizer_is_identical_across_processes():
    """tokenizers' own WordPiece trainer breaks ties in hash order, which differs per process."""
    import subprocess
    import sys

    code = (
        "import hashlib, json; from posviz.train.corpus import DEMO_CORPUS, packaged_corpus; from posviz.train.tokenizer import train_tokenizer;"
        "v = train_tokenizer(packaged_corpus(DEMO_CORPUS, 400), 1500).get_vocab();"
        "print(hashlib.sha256(json.dumps(sorted(v.items())).encode()).hexdigest())"
    )
    runs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout for _ in range(3)}
    assert len(runs) == 1


def test_blocks_start_with_cls_and_hold_the_token_stream():
    texts = packaged_corpus(DEMO_CORPUS, 40)
    tok = train_tokenizer(texts, 500)
    blocks = make_blocks(tok, texts, 32)
    assert blocks.shape[1] == 32 and len(blocks) > 10
    assert np.all(blocks[:, 0] == tok.cls_token_id) and np.all(blocks[:, -1] == tok.sep_token_id)
    stream = []
    for t in texts:  # independent reconstruction of the concatenated stream
        stream += tok.encode(t, add_special_tokens=False) + [tok.sep_token_id]
    np.testing.assert_array_equal(blocks[:, 1:-1].ravel(), stream[: blocks[:, 1:-1].size])


PINNED_SHA256 = "a467c50c688caaed23a434db6b7ed0cc90d40603fd02cad8755509f46834b6aa"  # the pin itself: never recomputed here


def test_packaged_corpus_is_the_same_bytes_on_every_python():
    """Read the packaged file without posviz's reader: its JSON hashes to the pin, and posviz returns exactly it."""
    import gzip
    import hashlib
    from pathlib import Path

    import posviz.train.corpus as corpus

    body = gzip.decompress((Path(corpus.__file__).with_name("corpora") / "cpython-3.11.7-docstrings.json.gz").read_bytes())
    assert hashlib.sha256(body).hexdigest() == PINNED_SHA256
    docs = json.loads(body)
    assert DEMO_CORPUS == "cpython-3.11.7-docstrings" and load_corpus([DEMO_CORPUS]) == docs and len(docs) == 6681
    assert load_corpus([f"{DEMO_CORPUS}:25"]) == docs[:25]
    assert corpus.corpus_identity(docs) == {"corpus_sha256": PINNED_SHA256, "corpus_documents": 6681, "corpus_bytes": len(body)}
    assert sum(" the " in d for d in docs[:30]) > 10 and all(len(d) >= 40 for d in docs)


def test_a_damaged_packaged_corpus_is_refused(tmp_path, monkeypatch):
    import gzip

    import posviz.train.corpus as corpus

    docs = packaged_corpus(DEMO_CORPUS)
    (tmp_path / "cpython-3.11.7-docstrings.json.gz").write_bytes(gzip.compress(json.dumps(docs[:-1], ensure_ascii=False).encode()))
    monkeypatch.setattr(corpus, "_CORPORA_DIR", tmp_path)
    with pytest.raises(CorpusError, match="is damaged"):
        load_corpus([DEMO_CORPUS])
    (tmp_path / "cpython-3.11.7-docstrings.json.gz").write_bytes(b"not gzip")
    with pytest.raises(CorpusError, match="cannot be read"):
        load_corpus([DEMO_CORPUS])


def test_a_result_made_from_other_text_is_refused_naming_both_hashes():
    from posviz.errors import PosvizError
    from posviz.train.corpus import check_same_corpus, corpus_identity

    a, b = corpus_identity(["one text"]), corpus_identity(["another text"])
    check_same_corpus(a, a, "the run r")
    check_same_corpus({}, b, "the run r")  # made before hashes were recorded: the caller's other checks apply
    with pytest.raises(PosvizError) as e:
        check_same_corpus(a, b, "the run r")
    assert str(e.value).startswith("the run r was made from corpus sha256 " + a["corpus_sha256"][:12])
    assert b["corpus_sha256"][:12] in str(e.value)
