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
from posviz.finetune.results import load_results, results_path

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


def test_no_positions_score_exactly_chance_on_bigram_shift(none_run, absolute_run, train_corpus, tmp_path):
    """The control: without positions a sentence and its bigram shift get the same output, so one of each pair is wrong.

    The --scheme none encoder is permutation-equivariant and pools [CLS], so the two versions of a pair differ only
    in the order of float sums: the tolerance is zero (a flip needs a logit margin below ~1e-6). An absolute model
    can tell them apart: fine-tuned on 16 pairs it fits them (scored on those same pairs), far above chance.
    """
    from posviz.finetune.builtin import make_pairs, sentences
    from posviz.train.corpus import load_corpus

    pairs = make_pairs(sentences(load_corpus([str(train_corpus)])), "bshift", 16, lambda t: len(t.split()) <= 10)
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps({"text": t, "label": y}) + "\n" for p in pairs for y, t in enumerate(p)))
    runs = [_copy(none_run, tmp_path, "none"), _copy(absolute_run, tmp_path, "abs")]
    fit = {str(run): posviz.finetune([run], tasks=[f"jsonl:{path},{path}"], steps=steps, lr=1e-3, batch_size=32)
           for run, steps in zip(runs, (8, 40), strict=True)}
    score = {k: next(r["value"] for r in v if r["seed"] == "median" and r["metric"] == "accuracy") for k, v in fit.items()}
    assert score[str(runs[0])] == 50.0
    assert score[str(runs[1])] >= 65.0
    builtin = posviz.finetune(runs[:1], tasks=["builtin/bshift", "builtin/shuffled", "builtin/replaced"], seeds=[0, 1],
                              steps=3, train_size=32, dev_size=100, lr=1e-3, batch_size=16)
    for task in ("builtin/bshift", "builtin/shuffled"):  # both word-order probes: exactly chance without positions
        assert [r["value"] for r in builtin if r["task"] == task and r["metric"] == "accuracy"] == [50.0] * 3
    document = json.loads(results_path(runs[0], "builtin/bshift", 12).read_text())
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
