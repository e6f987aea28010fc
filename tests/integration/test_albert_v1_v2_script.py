"""scripts/albert_v1_v2.py end to end with tiny settings: runs, resumability, every number in CSV and JSON."""

from __future__ import annotations

import csv
import json
import math
import sys
from pathlib import Path

import pytest

from tests.script_runs import load_script

pytestmark = pytest.mark.usefixtures("one_thread")

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "albert_v1_v2.py"


@pytest.fixture(scope="module")
def script():
    yield load_script(SCRIPT, "albert_v1_v2")
    del sys.modules["albert_v1_v2"]




@pytest.mark.slow
def test_v1_and_v2_runs_for_two_seeds_write_every_number(script, train_corpus, tmp_path, capsys):
    import hashlib

    out, text = tmp_path / "exp", tmp_path / "texts.txt"
    text.write_text(train_corpus.read_text(encoding="utf-8"), encoding="utf-8")  # a copy: changed at the end
    argv = ["--out", str(out), "--corpus", str(text), "--seeds", "0", "1", "--steps", "4", "--eval-every", "2",
            "--seq-len", "32", "--batch-size", "8", "--vocab-size", "600"]
    assert script.main(argv) == 0
    assert sorted(p.name for p in out.glob("v*-s*")) == ["v1-s0", "v1-s1", "v2-s0", "v2-s1"]
    v1 = json.loads((out / "v1-s0" / "run.json").read_text())
    v2 = json.loads((out / "v2-s0" / "run.json").read_text())
    assert (v1["dropout"], v1["train_fraction"], v1["steps"]) == (0.1, 0.5, 2)
    assert (v2["dropout"], v2["train_fraction"], v2["steps"]) == (0.0, 1.0, 4)
    assert v1["eval_blocks"] == v2["eval_blocks"] and v1["train_blocks"] == -(-v2["train_blocks"] // 2)

    doc = json.loads((out / "albert_v1_v2.json").read_text())
    evals = doc["evaluations"]
    assert [(r["variant"], r["seed"], r["step"]) for r in evals] == [
        ("v1", 0, 0), ("v1", 0, 2), ("v1", 1, 0), ("v1", 1, 2), ("v2", 0, 0), ("v2", 0, 2), ("v2", 0, 4), ("v2", 1, 0), ("v2", 1, 2), ("v2", 1, 4)]
    # every field of every trajectory record, unchanged
    for row in evals:
        record = next(r for r in json.loads((Path(row["run"]) / "trajectory.json").read_text())["evaluations"] if r["step"] == row["step"])
        heads = record.pop("toeplitzness_heads")
        assert {k: row[k] for k in record} == record
        assert [row[f"toeplitzness_head_{h}"] for h in range(len(heads))] == heads
    with open(out / "albert_v1_v2_evaluations.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == len(evals) and float(rows[-1]["toeplitzness_ep"]) == pytest.approx(evals[-1]["toeplitzness_ep"], rel=1e-12, abs=1e-12)

    finals = {(r["variant"], r["seed"]): r for r in doc["final"]}
    assert sorted(finals) == [("v1", 0), ("v1", 1), ("v2", 0), ("v2", 1)] and finals["v2", 1]["step"] == 4
    summary = {r["variant"]: r for r in doc["summary"]}
    acc = [finals["v2", s]["eval_accuracy"] for s in (0, 1)]
    assert summary["v2"]["n"] == 2 and summary["v2"]["eval_accuracy_mean"] == pytest.approx(sum(acc) / 2)
    assert summary["v2"]["eval_accuracy_sd"] == pytest.approx(abs(acc[0] - acc[1]) / math.sqrt(2))
    trajectories = {(r["variant"], r["step"]): r for r in doc["trajectories"]}
    assert sorted(trajectories) == [("v1", 0), ("v1", 2), ("v2", 0), ("v2", 2), ("v2", 4)]
    assert doc["settings"]["variants"][0] == {"name": "v1", "dropout": 0.1, "train_fraction": 0.5, "steps": 2}
    # the headline variant's null and excess are logged, and the excess is (R² − null)/(1 − null)
    last = evals[-1]
    assert last["excess_ep_offdiag"] == pytest.approx((last["toeplitzness_ep_offdiag"] - last["null_ep_offdiag"]) / (1 - last["null_ep_offdiag"]))
    png = (out / "albert_v1_v2.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 20_000

    # Rerun: finished runs are skipped and give the same tables; other settings are refused.
    capsys.readouterr()
    before = (out / "albert_v1_v2.json").read_text()
    assert script.main(argv) == 0
    assert capsys.readouterr().err.count("finished, skipped") == 4
    assert (out / "albert_v1_v2.json").read_text() == before
    assert script.main([*argv, "--v1-dropout", "0.2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {out} holds an experiment with other settings (variants differ)")

    # The same --corpus with other text in it: refused, naming both hashes (the experiment records the corpus by content).
    docs = [d.strip() for d in text.read_text(encoding="utf-8").split("\n\n") if d.strip()]
    recorded = json.loads((out / "experiment.json").read_text())["corpus_sha256"]
    assert recorded == hashlib.sha256(json.dumps(docs, ensure_ascii=False).encode()).hexdigest()
    text.write_text(text.read_text(encoding="utf-8") + "\n\nOne more paragraph.\n", encoding="utf-8")
    now = hashlib.sha256(json.dumps([*docs, "One more paragraph."], ensure_ascii=False).encode()).hexdigest()
    assert script.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: the experiment in {out} was made from corpus sha256 {recorded[:12]}"), err
    assert now[:12] in err[0] and (out / "albert_v1_v2.json").read_text() == before


def test_an_experiment_stopped_by_bad_input_is_not_held_to_its_settings(script, train_corpus, tmp_path, capsys):
    """Bad input stops the first attempt before any run starts: the corrected rerun must not be refused."""
    out = tmp_path / "exp"
    argv = ["--out", str(out), "--corpus", str(train_corpus), "--steps", "4", "--eval-every", "2", "--seq-len", "32"]
    assert script.main([*argv, "--scheme", "bogus"]) == 2
    assert script.main([*argv, "--v1-fraction", "0"]) == 2  # other settings, yet its own error, not "other settings"
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: unknown scheme 'bogus' (hint: choose one of absolute, none, tisa, absolute+tisa, tupe-a, tupe-r, t5, alibi, rope, sinusoidal)",
                   "error: --train-fraction must be above 0 and at most 1, not 0.0"]
    assert json.loads((out / "experiment.json").read_text())["variants"][0]["train_fraction"] == 0.0  # the newest record
    assert not list(out.glob("*/run.json"))
