"""`posviz finetune` under `torchrun --nproc_per_node 2` (CPU, gloo): one report, one results file, one error line."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from posviz.cli.app import app
from posviz.finetuning.results import results_path
from tests.integration.test_train_processes import assert_left_with, driven, torchrun

FAST = ("--steps", "4", "--batch-size", "8", "--lr", "1e-3")


@pytest.mark.slow
def test_two_processes_report_once_and_write_one_results_file(absolute_run, fruit_csv, tmp_path):
    run = shutil.copytree(absolute_run, tmp_path / "run")
    task = f"csv:{fruit_csv}"
    proc = torchrun("finetune", str(run), "--task", task, "--seeds", "0,1", "--format", "json", *FAST)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "error:" not in proc.stderr
    records = json.loads(proc.stdout)  # one JSON document: only the main process prints
    per_seed = [r for r in records if r["seed"] != "median"]
    assert sorted({r["seed"] for r in per_seed}) == [0, 1]
    assert {(r["seed"], r["metric"]) for r in per_seed} == {(s, m) for s in (0, 1) for m in ("accuracy", "score")}
    for r in per_seed:  # 6 dev examples, each predicted once (the gathered predictions drop the sampler's padding)
        assert abs(r["value"] * 6 / 100 - round(r["value"] * 6 / 100)) < 1e-9
    assert [proc.stderr.count(f" seed {s}: accuracy ") for s in (0, 1)] == [1, 1], proc.stderr  # progress: main only

    path = results_path(run, task, 12)
    document = json.loads(path.read_text())
    assert document["settings"]["world_size"] == 2 and document["settings"]["batch_size"] == 8
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no .work left behind

    # The results are found again by one process only with the same settings: a global batch of 8 is not 16.
    again = CliRunner().invoke(app, ["finetune", str(run), "--task", task, "--seeds", "0,1", *FAST])
    assert again.exit_code == 2 and again.stderr.startswith("error: ") and len(again.stderr.strip().splitlines()) == 1
    assert "world_size" in again.stderr, again.stderr


@pytest.mark.slow
def test_a_user_error_stops_both_processes_with_one_line(absolute_run, tmp_path):
    missing = tmp_path / "missing.csv"
    proc, codes = driven("none", tmp_path / "codes", "finetune", str(absolute_run), "--task", f"csv:{missing}", *FAST)
    assert proc.returncode != 0
    errors = [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and str(missing) in errors[0], proc.stderr
    assert_left_with(proc, codes, 2)
    # The one traceback is the launcher's own (ChildFailedError); no process printed one.
    assert proc.stderr.count("Traceback") == 1 and "ChildFailedError" in proc.stderr, proc.stderr
    assert not (absolute_run / "finetune").exists()
