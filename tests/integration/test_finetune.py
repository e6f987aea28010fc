"""`posviz finetune` end to end on real tiny runs and models: records, reuse, the no-position control, bad input."""

from __future__ import annotations

import csv
import io
import json
import shutil
import statistics
import subprocess
import sys

import pytest
from typer.testing import CliRunner

import posviz
from posviz.cli.app import app
from posviz.finetuning.results import load_results, results_path

pytestmark = pytest.mark.usefixtures("one_thread")

FAST = ("--steps", "4", "--batch-size", "16", "--lr", "1e-3")


def _copy(run, tmp_path, name="run"):
    """A private copy of a session run: fine-tuning writes RUN/finetune/."""
    return shutil.copytree(run, tmp_path / name)


def test_json_records_medians_and_reuse(absolute_run, fruit_csv, tmp_path):
    run = _copy(absolute_run, tmp_path)
    args = ["finetune", str(run), "--task", f"csv:{fruit_csv}", "--seeds", "0,1", "--format", "json", *FAST]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    records = json.loads(first.stdout)
    per_seed = [r for r in records if r["seed"] != "median"]
    assert {(r["seed"], r["metric"]) for r in per_seed} == {(s, m) for s in (0, 1) for m in ("accuracy", "score")}
    assert all(r["source"] == str(run) and r["task"] == f"csv:{fruit_csv}" and r["step"] == 12 for r in records)
    for r in per_seed:  # 6 dev examples: accuracy is a multiple of 100/6
        assert 0 <= r["value"] <= 100 and abs(r["value"] * 6 / 100 - round(r["value"] * 6 / 100)) < 1e-9
    for metric in ("accuracy", "score"):
        values = [r["value"] for r in per_seed if r["metric"] == metric]
        median = next(r for r in records if r["seed"] == "median" and r["metric"] == metric)
        assert median["value"] == statistics.median(values) and (median["min"], median["max"], median["n"]) == (min(values), max(values), 2)
    path = results_path(run, f"csv:{fruit_csv}", 12)
    assert path.is_file() and not (path.parent / ".work").exists()
    assert load_results(run) == sorted(records, key=lambda r: (r["metric"], r["seed"] == "median", str(r["seed"])))
    stamp = path.stat().st_mtime_ns

    again = CliRunner().invoke(app, args)  # same settings: both seeds reused, nothing recomputed
    assert again.exit_code == 0 and "seed 0: finished earlier, reused" in again.stderr
    assert json.loads(again.stdout) == records and path.stat().st_mtime_ns == stamp
    table = CliRunner().invoke(app, [a for a in args if a not in ("--format", "json")])
    median = next(r for r in records if r["seed"] == "median" and r["metric"] == "accuracy")
    row = next(line.split() for line in table.stdout.splitlines() if line.startswith(str(run)) and " accuracy " in line)
    assert row[1:] == ["12", f"csv:{fruit_csv}", "accuracy", "(=", "score)", f"{median['value']:.2f}",
                       f"{median['min']:.2f}–{median['max']:.2f}", "2"]  # one metric: its equal score shares the line
    assert not any(line.startswith(str(run)) and " score " in line.replace("(= score)", "") for line in table.stdout.splitlines())

    other = CliRunner().invoke(app, [*args, "--lr", "5e-4"])  # other settings: refused, nothing written
    assert other.exit_code == 2 and other.stderr.startswith("error: ") and len(other.stderr.strip().splitlines()) == 1
    assert "other settings (learning_rate differ)" in other.stderr and path.stat().st_mtime_ns == stamp


#: "The same logits", relative to the largest logit of the model on the pairs. The two versions of a pair are the same
#: tokens in another order, so a model without positions computes the same sums in another order: they differ by
#: float rounding only. float32 (as fine-tuning runs on CPU): 1e-4, about 840 float32 epsilons (2^-23); float64:
#: 1e-12, about 4500 float64 epsilons (2^-52). Measured over 10 pre-training seeds x 2 corpora (the pinned corpus and
#: another Python's stdlib docstrings), 16 pairs of each probe: at most 2.4e-6 (float32) and 4.6e-15 (float64).
SAME_FLOAT32, SAME_FLOAT64 = 1e-4, 1e-12
#: "Different logits" for the absolute model (float64, every pair): 10^4 times the float64 tolerance. Measured the same
#: way: at least 5.3e-5 (the logit gap comes from the position table, not from rounding: float32 gives the same digits).
APART = 1e-8


def _reordered_pairs(corpus, task: str, tokenizer, n: int = 16) -> list[tuple[str, str]]:
    """``n`` (sentence, its bigram shift or shuffle) pairs of ``corpus`` that fit 32 positions (the runs' --seq-len)."""
    from posviz.finetuning.builtin import make_pairs, sentences
    from posviz.train.corpus import load_corpus

    pairs = make_pairs(sentences(load_corpus([str(corpus)])), task, n, lambda t: len(tokenizer(t)["input_ids"]) <= 32)
    assert len(pairs) == n
    return pairs


def _logits(model, tokenizer, texts: list[str]):
    """The model's logits (as float64) and each text's token ids, padding left out."""
    import torch

    enc = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**enc).logits.double().numpy()
    rows = zip(enc["input_ids"].tolist(), enc["attention_mask"].tolist(), strict=True)
    return logits, [[t for t, m in zip(ids, mask, strict=True) if m] for ids, mask in rows]


def test_no_positions_give_a_sentence_and_its_reordering_the_same_logits(none_run, absolute_run, train_corpus):
    """Why the control scores exactly 50 %, by construction rather than by a fine-tuning outcome.

    Each run's last checkpoint under a new (seeded) classification head, as ``posviz finetune`` builds it: with
    ``--scheme none`` (no positions, bidirectional attention, [CLS] pooled) a sentence and its bigram shift or shuffle
    get the same logits up to float rounding; with ``--scheme absolute`` every pair gets different logits.
    """
    import copy

    import numpy as np
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    import posviz.models  # noqa: F401  (registers the posviz classes with the Auto classes)

    tokenizer = AutoTokenizer.from_pretrained(none_run / "tokenizer")
    assert (absolute_run / "tokenizer" / "tokenizer.json").read_bytes() == (none_run / "tokenizer" / "tokenizer.json").read_bytes()
    models = {}
    for run in (none_run, absolute_run):
        torch.manual_seed(0)
        model = AutoModelForSequenceClassification.from_pretrained(run / "checkpoint-12", num_labels=2).eval()
        models[run] = {torch.float32: model, torch.float64: copy.deepcopy(model).double()}
    for task in ("bshift", "shuffled"):
        originals, altered = zip(*_reordered_pairs(train_corpus, task, tokenizer), strict=True)
        gaps = {}
        for run, by_dtype in models.items():
            for dtype, model in by_dtype.items():
                (a, ids_a), (b, ids_b) = _logits(model, tokenizer, list(originals)), _logits(model, tokenizer, list(altered))
                # the premise: the same tokens ([CLS] first, [SEP] last) in another order
                assert all(x != y and sorted(x) == sorted(y) for x, y in zip(ids_a, ids_b, strict=True)), task
                gaps[run, dtype] = np.abs(a - b).max(axis=1) / np.abs(np.concatenate([a, b])).max()
        assert gaps[none_run, torch.float32].max() <= SAME_FLOAT32, task
        assert gaps[none_run, torch.float64].max() <= SAME_FLOAT64, task
        assert gaps[absolute_run, torch.float64].min() >= APART, task


def test_no_positions_score_exactly_chance_on_bigram_shift(none_run, train_corpus, tmp_path):
    """The control end to end: fine-tuned without positions, each pair's two versions get the same prediction.

    The logits of the two versions differ by float rounding only (the test above), so one of them could be predicted
    otherwise only where the fine-tuned head's margin between its two classes is as small as that gap. Measured with
    these settings over 10 pre-training seeds x 2 corpora (the pinned one and another Python's stdlib docstrings;
    fine-tuning seeds 2s and 2s+1 on the probes, s on the pairs): every score exactly 50; the gap between a pair's two
    margins at most 1.0e-7; the smallest margin on dev 1.9e-3 or more in 79 of 80 probe runs (7.0e-7 in the other),
    8.4e-2 or more on the pairs. Here (pinned corpus, seed 0): 5.2e-3 or more, over 10^5 times the gap.
    """
    from posviz.finetuning.builtin import make_pairs, sentences
    from posviz.train.corpus import load_corpus

    pairs = make_pairs(sentences(load_corpus([str(train_corpus)])), "bshift", 16, lambda t: len(t.split()) <= 10)
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps({"text": t, "label": y}) + "\n" for p in pairs for y, t in enumerate(p)))
    run = _copy(none_run, tmp_path, "none")
    fit = posviz.finetune([run], tasks=[f"jsonl:{path},{path}"], steps=8, lr=1e-3, batch_size=32)  # dev = train
    assert next(r["value"] for r in fit if r["seed"] == "median" and r["metric"] == "accuracy") == 50.0
    builtin = posviz.finetune([run], tasks=["builtin/bshift", "builtin/shuffled", "builtin/replaced"], seeds=[0, 1],
                              steps=3, train_size=32, dev_size=100, lr=1e-3, batch_size=16)
    for task in ("builtin/bshift", "builtin/shuffled"):  # both word-order probes: exactly chance without positions
        assert [r["value"] for r in builtin if r["task"] == task and r["metric"] == "accuracy"] == [50.0] * 3
    document = json.loads(results_path(run, "builtin/bshift", 12).read_text())
    assert document["settings"]["corpus"] == [str(train_corpus)]  # the run's pre-training corpus by default
    assert document["settings"]["task"]["dev_examples"] == {"": 100}


def test_hf_model_folder_csv_output_and_checkpoints_all(absolute_run, fruit_csv, tmp_path):
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

    tokenizer = AutoTokenizer.from_pretrained(absolute_run / "tokenizer")
    bert = tmp_path / "bert"
    BertForMaskedLM(BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                               intermediate_size=64, max_position_embeddings=32)).save_pretrained(bert)
    tokenizer.save_pretrained(bert)
    out, table = tmp_path / "results", tmp_path / "table.csv"
    res = CliRunner().invoke(app, ["finetune", str(bert), "--task", f"csv:{fruit_csv}", "--out", str(out), "-o", str(table), *FAST])
    assert res.exit_code == 0, res.output
    rows = list(csv.DictReader(io.StringIO(table.read_text())))
    assert {r["seed"] for r in rows} == {"0", "median"} and {r["source"] for r in rows} == {str(bert)}
    assert results_path(out, f"csv:{fruit_csv}", None).is_file()

    run = _copy(absolute_run, tmp_path)
    records = posviz.finetune([run], tasks=[f"csv:{fruit_csv}"], checkpoints="all", steps=2, batch_size=16)
    assert sorted({r["step"] for r in records}) == [6, 12]
    assert sorted(p.name for p in (run / "finetune").iterdir()) == ["step-12", "step-6"]


def test_an_interrupted_seed_resumes_from_its_trainer_checkpoint(absolute_run, fruit_csv, tmp_path, monkeypatch):
    from transformers import Trainer

    task = [f"csv:{fruit_csv}"]
    whole = posviz.finetune([_copy(absolute_run, tmp_path, "a")], tasks=task, steps=8, batch_size=16)
    run = _copy(absolute_run, tmp_path, "b")
    predict = Trainer.predict

    def interrupted(self, *args, **kwargs):  # training finished and checkpointed, then the process stops
        raise KeyboardInterrupt

    monkeypatch.setattr(Trainer, "predict", interrupted)
    with pytest.raises(KeyboardInterrupt):
        posviz.finetune([run], tasks=task, steps=8, batch_size=16)
    work = results_path(run, task[0], 12).parent / ".work"
    assert sorted(p.name for p in work.rglob("checkpoint-*")) == ["checkpoint-8"]
    monkeypatch.setattr(Trainer, "predict", predict)
    resumed = posviz.finetune(run, tasks=task[0], steps=8, batch_size=16, resume=True)  # one source, one task: no lists needed
    assert [r["value"] for r in resumed] == [r["value"] for r in whole]
    assert not work.exists()


def test_bad_sources_are_one_line_errors(tiny_checkpoints, fruit_csv, tmp_path):
    llama = tiny_checkpoints("llama")
    res = CliRunner().invoke(app, ["finetune", str(llama), "--task", f"csv:{fruit_csv}", "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "llama is a decoder-only (causal) model" in res.stderr
    empty = tmp_path / "empty-run"
    (empty / "checkpoint-5").mkdir(parents=True)
    (empty / "run.json").write_text("{}")
    res = CliRunner().invoke(app, ["finetune", str(empty), "--task", f"csv:{fruit_csv}"])
    assert res.exit_code == 2 and "no complete checkpoint" in res.stderr
    assert not (tmp_path / "o").exists() and not (empty / "finetune").exists()
    taken = tmp_path / "taken.txt"
    taken.write_text("notes")
    for out in (taken, taken / "sub"):  # a file, or a folder under one: refused before any model is loaded
        res = CliRunner().invoke(app, ["finetune", str(tiny_checkpoints("bert")), "--task", f"csv:{fruit_csv}", "--out", str(out)])
        assert res.exit_code == 2 and res.stderr.splitlines() == [
            f"error: --out {out} cannot be a folder: {taken} is a file (hint: give a folder with --out)"]
    assert taken.read_text() == "notes"
    res = CliRunner().invoke(app, ["finetune", str(empty), "--checkpoints", "last", "--task", f"csv:{fruit_csv}"])
    assert res.exit_code == 2 and res.stderr.splitlines() == [
        "error: --checkpoints last: give whole numbers separated by commas, e.g. 200,400, or all"]


def test_unknown_task_from_a_subprocess(absolute_run):
    proc = subprocess.run([sys.executable, "-m", "posviz", "finetune", str(absolute_run), "--task", "glue/squad"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == ["error: unknown GLUE task 'squad' (hint: choose one of sst2, mnli, qqp, stsb, cola, mrpc, qnli, rte)"]
    assert not (absolute_run / "finetune").exists()
