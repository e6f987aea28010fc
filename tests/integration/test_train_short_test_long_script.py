"""scripts/train_short_test_long.py end to end at a toy budget: train causal runs, score them past their length,
keep the results, resume from them alone, tabulate with n/a where a learned table stops."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.script_runs import run_script

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "train_short_test_long.py"
TOY = ["--seeds", "0", "--schemes", "absolute", "alibi", "--steps", "4", "--eval-every", "2", "--seq-len", "16",
       "--factors", "1,2", "--eval-blocks", "2", "--vocab-size", "300"]


def run(tmp_path: Path, *extra: str, in_process: bool = False) -> subprocess.CompletedProcess:
    """The script as a program (``in_process``: its ``main`` in this process, for runs that train nothing)."""
    return run_script(SCRIPT, ["--out", str(tmp_path / "runs"), "--results", str(tmp_path / "results"), *TOY, *extra],
                      in_process=in_process)


def test_pipeline_scores_past_the_training_length_and_resumes_from_results(tmp_path):
    first = run(tmp_path)
    assert first.returncode == 0, first.stderr
    results = tmp_path / "results"
    kept = sorted(p.name for p in (results / "runs").iterdir())
    assert kept == ["absolute-s0.json", "alibi-s0.json"]
    assert not (tmp_path / "runs" / "alibi-s0").exists()  # checkpoints deleted once the results are kept

    # the held-out text is a document split of the packaged corpus, recorded by hash; the runs trained on the rest
    settings = json.loads((results / "experiment.json").read_text())
    alibi = json.loads((results / "runs" / "alibi-s0.json").read_text())
    records = {r["length"]: r for r in alibi["extrapolate"]}
    assert sorted(records) == [16, 32]
    assert all(r["corpus_sha256"] == settings["heldout_corpus_sha256"] for r in records.values())
    assert settings["train_corpus_sha256"] != settings["heldout_corpus_sha256"]
    assert alibi["settings"]["objective"] == "causal" and records[32]["objective"] == "causal"
    assert records[32]["loss"] is not None and records[32]["training_length"] == 16

    # a learned table of 16 positions cannot take 32: a null loss with its reason, and n/a in the table
    absolute = {r["length"]: r for r in json.loads((results / "runs" / "absolute-s0.json").read_text())["extrapolate"]}
    assert absolute[16]["loss"] is not None and absolute[32]["loss"] is None and absolute[32]["reason"]
    table = (results / "table.md").read_text()
    absolute_row = next(line for line in table.splitlines() if line.startswith("| absolute"))
    assert absolute_row.count("n/a") == 2  # the 2L cell and the loss(8L) - loss(L) cell
    rows = json.loads((results / "table.json").read_text())
    alibi_2l = next(r for r in rows if r["scheme"] == "alibi" and r["length"] == 32)
    assert alibi_2l["loss_mean"] == records[32]["loss"] and alibi_2l["seeds"] == 1
    assert (results / "figure.png").stat().st_size > 10_000

    # a second machine: no run folders, only the kept results; nothing is trained again
    again = run(tmp_path, in_process=True)
    assert again.returncode == 0, again.stderr
    assert "alibi-s0: results kept, skipped" in again.stderr and "training" not in again.stderr

    # other settings on the same results: refused with one error line, results untouched
    before = (results / "runs" / "alibi-s0.json").read_bytes()
    other = run(tmp_path, "--batch-size", "8", in_process=True)
    assert other.returncode == 2 and other.stderr.startswith("error: ") and "batch_size" in other.stderr
    assert (results / "runs" / "alibi-s0.json").read_bytes() == before
