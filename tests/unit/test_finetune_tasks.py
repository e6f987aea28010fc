"""Fine-tuning tasks and metrics: local files, built-in tasks, GLUE through datasets, bad input."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from posviz.errors import PosvizError
from posviz.finetuning.builtin import bigram_shift, make_pairs, sentences, shuffled_words
from posviz.finetuning.metrics import compute_metrics
from posviz.finetuning.tasks import load_task


def _csv(path, rows, header=("text", "label")):
    lines = [",".join(header)] + [",".join(map(str, r)) for r in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _jsonl(path, rows):
    path.write_text("".join(json.dumps({"text": t, "label": y}) + "\n" for t, y in rows), encoding="utf-8")
    return path


def test_metrics_match_their_definitions():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 200)
    p = np.where(rng.random(200) < 0.8, y, 1 - y)
    tp, tn = np.sum((p == 1) & (y == 1)), np.sum((p == 0) & (y == 0))
    fp, fn = np.sum((p == 1) & (y == 0)), np.sum((p == 0) & (y == 1))
    m = compute_metrics(("accuracy", "f1", "matthews"), p, y)
    assert m["accuracy"] == pytest.approx(100 * (tp + tn) / 200)
    assert m["f1"] == pytest.approx(100 * 2 * tp / (2 * tp + fp + fn))
    mcc = (tp * tn - fp * fn) / np.sqrt(float((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)))
    assert m["matthews"] == pytest.approx(100 * mcc)
    x, t = rng.normal(size=50), rng.normal(size=50)
    r = compute_metrics(("pearson", "spearman"), x, t)
    assert r["pearson"] == pytest.approx(100 * np.corrcoef(x, t)[0, 1])
    ranks = lambda v: np.argsort(np.argsort(v))  # noqa: E731  (no ties in continuous draws)
    assert r["spearman"] == pytest.approx(100 * np.corrcoef(ranks(x), ranks(t))[0, 1])
    assert compute_metrics(("pearson",), np.zeros(5), t[:5]) == {"pearson": 0.0}  # constant prediction


def test_csv_with_held_out_dev_and_string_labels(tmp_path):
    rows = [(f"text number {i}", "pos" if i % 3 else "neg") for i in range(40)]
    data = load_task(f"csv:{_csv(tmp_path / 'a.csv', rows)}")
    assert data.labels == ["neg", "pos"] and data.metrics == ("accuracy",)
    assert len(data.dev[""]) == 4 and len(data.train) == 36  # 10 % held out
    assert {e.text for e in data.dev[""]}.isdisjoint(e.text for e in data.train)
    again = load_task(f"csv:{tmp_path / 'a.csv'}")
    assert [e.text for e in again.dev[""]] == [e.text for e in data.dev[""]]  # always the same examples


def test_jsonl_pairs_regression_and_given_dev(tmp_path):
    train, dev = tmp_path / "t.jsonl", tmp_path / "d.jsonl"
    train.write_text("".join(json.dumps({"text": f"a{i}", "text_pair": f"b{i}", "label": i / 4}) + "\n" for i in range(8)))
    dev.write_text(json.dumps({"text": "x", "text_pair": "y", "label": 3}) + "\n")
    data = load_task(f"jsonl:{train},{dev}")
    assert data.labels is None and data.num_labels == 1 and data.metrics == ("pearson", "spearman")
    assert data.train[1].text_pair == "b1" and data.train[1].label == 0.25
    assert data.dev[""][0].label == 3.0 and isinstance(data.dev[""][0].label, float)


@pytest.mark.parametrize("case, message", [
    ("unknown", "unknown task"),
    ("glue-unknown", "unknown GLUE task"),
    ("builtin-unknown", "unknown built-in task"),
    ("missing-column", "has no label column (columns: text, target)"),
    ("unseen-label", "label(s) 'maybe' never seen in training"),
    ("empty-train", "the training split is empty"),
    ("empty-dev", "the dev split is empty"),
    ("one-label", "every training label is 1; a classification task needs two or more"),
    ("regression-dev-class", "the training labels are real numbers (regression), and a dev label is 'high'"),
    ("nested-label", "has a label that is not a single value ([1, 2])"),
    ("missing-file", "does not exist"),
])
def test_bad_tasks_are_one_line_errors(tmp_path, case, message):
    good = _csv(tmp_path / "good.csv", [("a b", "yes"), ("c d", "no")])
    specs = {
        "unknown": "squad",
        "glue-unknown": "glue/squad",
        "builtin-unknown": "builtin/shuffle",
        "missing-column": f"csv:{_csv(tmp_path / 'm.csv', [('a', 1)], header=('text', 'target'))}",
        "unseen-label": f"csv:{good},{_csv(tmp_path / 'dev.csv', [('e f', 'maybe')])}",
        "empty-train": f"csv:{_csv(tmp_path / 'e.csv', [])},{good}",
        "empty-dev": f"csv:{good},{_csv(tmp_path / 'e.csv', [])}",
        "missing-file": f"csv:{tmp_path / 'nope.csv'}",
        "one-label": f"csv:{_csv(tmp_path / 'one.csv', [('a b', 1), ('c d', 1), ('e f', 1)])}",
        "regression-dev-class": f"jsonl:{_jsonl(tmp_path / 'r.jsonl', [('a b', 1.5), ('c d', 0.5)])},"
                                f"{_jsonl(tmp_path / 'rd.jsonl', [('e f', 'high')])}",
        "nested-label": f"jsonl:{_jsonl(tmp_path / 'n.jsonl', [('a b', 0), ('c d', [1, 2])])}",
    }
    with pytest.raises(PosvizError) as e:
        load_task(specs[case])
    assert message in str(e.value) and "\n" not in str(e.value)


def test_builtin_bshift_pairs_every_dev_sentence_with_its_swap(train_corpus):
    data = load_task("builtin/bshift", corpus=[str(train_corpus)], train_size=200, dev_size=100)
    dev, train = data.dev[""], data.train
    assert len(dev) == 100 and len(train) == 200 and data.labels == [0, 1]
    for original, shifted in zip(dev[::2], dev[1::2], strict=True):
        assert (original.label, shifted.label) == (0, 1)
        a, b = original.text.split(), shifted.text.split()
        diff = [i for i in range(len(a)) if a[i] != b[i]]  # exactly two adjacent words, inverted, and different
        assert len(diff) == 2 and diff[1] == diff[0] + 1 and (a[diff[0]], a[diff[1]]) == (b[diff[1]], b[diff[0]])
        assert a[diff[0]].lower() != a[diff[1]].lower() and sorted(a) == sorted(b)
    assert {e.text for e in dev[::2]}.isdisjoint(e.text for e in train)


def test_builtin_shuffled_pairs_every_dev_sentence_with_a_reordering(train_corpus):
    data = load_task("builtin/shuffled", corpus=[str(train_corpus)], train_size=60, dev_size=60)
    dev = data.dev[""]
    assert len(dev) == 60 and data.labels == [0, 1]
    for original, shuffled in zip(dev[::2], dev[1::2], strict=True):
        a, b = original.text.split(), shuffled.text.split()
        assert (original.label, shuffled.label) == (0, 1)
        assert sorted(a) == sorted(b) and [w.lower() for w in a] != [w.lower() for w in b]  # same words, other order
    assert {e.text for e in dev[::2]}.isdisjoint(e.text for e in data.train)


def test_shuffled_words_never_returns_the_same_order():
    rng = random.Random(0)
    assert shuffled_words(["a", "A", "a"], rng) is None
    for _ in range(20):
        assert shuffled_words(["x", "y"], rng) == ["y", "x"]


def test_builtin_replaced_changes_one_word_and_respects_fits(train_corpus):
    fits = lambda text: len(text.split()) <= 12  # noqa: E731
    data = load_task("builtin/replaced", corpus=[str(train_corpus)], train_size=40, dev_size=40, fits=fits)
    for original, altered in zip(data.dev[""][::2], data.dev[""][1::2], strict=True):
        a, b = original.text.split(), altered.text.split()
        assert len(a) == len(b) <= 12 and sum(x != y for x, y in zip(a, b, strict=True)) == 1


def test_bigram_shift_never_swaps_equal_words():
    rng = random.Random(0)
    assert bigram_shift(["the", "The", "THE"], rng) is None
    assert bigram_shift(["a", "a", "b"], rng) == ["a", "b", "a"]
    assert make_pairs(sentences(["one two three four five six seven."]), "bshift", 5)[0][0] == "one two three four five six seven."


def test_glue_from_a_local_save_to_disk_copy(tmp_path, monkeypatch):
    """glue/NAME read by datasets.load_from_disk from POSVIZ_GLUE_DIR (a copy made with save_to_disk)."""
    import datasets

    splits = {"train": 6, "validation_matched": 3, "validation_mismatched": 2}
    dd = datasets.DatasetDict({
        name: datasets.Dataset.from_dict({"premise": [f"p{i}" for i in range(n)], "hypothesis": [f"h{i}" for i in range(n)],
                                          "label": [i % 3 for i in range(n)], "idx": list(range(n))})
        for name, n in splits.items()})
    dd.save_to_disk(str(tmp_path / "mnli"))
    monkeypatch.setenv("POSVIZ_GLUE_DIR", str(tmp_path))
    data = load_task("glue/mnli")
    assert data.labels == [0, 1, 2] and len(data.train) == 6
    assert {k: len(v) for k, v in data.dev.items()} == {"": 3, "mismatched": 2}
    assert data.metric_names() == ["accuracy", "accuracy_mismatched"]
    assert data.train[4].text == "p4" and data.train[4].text_pair == "h4" and data.train[4].label == 1
    with pytest.raises(PosvizError, match="does not exist"):
        load_task("glue/rte")


def test_glue_offline_without_a_cached_copy_fails_at_once(monkeypatch):
    monkeypatch.delenv("POSVIZ_GLUE_DIR", raising=False)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(PosvizError, match="offline .* and no cached copy"):
        load_task("glue/sst2")
