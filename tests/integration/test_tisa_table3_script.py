"""scripts/tisa_table3.py end to end at a toy budget: pre-train, fine-tune, keep the results, resume from them alone."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.script_runs import run_script

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "tisa_table3.py"
TOY = ["--seeds", "0", "--configs", "a-baseline", "--steps", "4", "--eval-every", "2", "--curve-steps", "2",
       "--finetune-steps", "2", "--train-size", "40", "--dev-size", "20", "--seq-len", "32", "--vocab-size", "300"]


def run(tmp_path: Path, *extra: str, in_process: bool = False) -> subprocess.CompletedProcess:
    """The script as a program (``in_process``: its ``main`` in this process, for runs that train nothing)."""
    return run_script(SCRIPT, ["--out", str(tmp_path / "runs"), "--results", str(tmp_path / "results"), *TOY, *extra],
                      in_process=in_process)


def test_pipeline_keeps_results_and_resumes_from_them(tmp_path):
    first = run(tmp_path)
    assert first.returncode == 0, first.stderr
    kept = tmp_path / "results" / "runs" / "a-baseline-s0"
    # the run's checkpoints are gone; what the tables need is kept: the log and every fine-tuning result
    assert not (tmp_path / "runs" / "a-baseline-s0").exists()
    assert sorted(p.name for p in kept.iterdir()) == ["finetune", "run.json", "trajectory.csv", "trajectory.json"]
    files = sorted(str(p.relative_to(kept / "finetune")) for p in (kept / "finetune").rglob("*.json"))
    # the last checkpoint on every task, the curve checkpoint (step 2) on the first word-order probe only
    assert files == ["step-2/builtin-shuffled.json", "step-4/builtin-bshift.json", "step-4/builtin-replaced.json",
                     "step-4/builtin-shuffled.json"]
    rows = json.loads((tmp_path / "results" / "table3.json").read_text())
    assert {r["task"] for r in rows} == {"builtin/shuffled", "builtin/bshift", "builtin/replaced", "average"}
    by_step = json.loads((tmp_path / "results" / "score-by-step.json").read_text())
    assert sorted({r["step"] for r in by_step}) == [2, 4]
    figure2 = json.loads((tmp_path / "results" / "figure2.json").read_text())  # x from the kept log of the run's last step
    log = {r["step"]: r for r in json.loads((kept / "trajectory.json").read_text())["evaluations"]}
    assert [(r["run"], r["step"], r["toeplitzness_ep"]) for r in figure2] == [("a-baseline-s0", 4, log[4]["toeplitzness_ep_offdiag"])]
    settings = json.loads((tmp_path / "results" / "experiment.json").read_text())
    assert settings["steps"] == 4 and settings["finetune_steps"] == 2

    # a second machine: no run folders, only the kept results; nothing is trained again
    again = run(tmp_path, in_process=True)
    assert again.returncode == 0, again.stderr
    assert "a-baseline-s0: results kept, skipped" in again.stderr and "pre-training" not in again.stderr
    assert not (tmp_path / "runs" / "a-baseline-s0").exists()

    # other settings on the same results: refused with one error line, results untouched
    before = (kept / "finetune" / "step-4" / "builtin-shuffled.json").read_bytes()
    other = run(tmp_path, "--finetune-lr", "1e-3", in_process=True)
    assert other.returncode == 2 and other.stderr.startswith("error: ") and "finetune_lr" in other.stderr
    assert (kept / "finetune" / "step-4" / "builtin-shuffled.json").read_bytes() == before


def test_an_unknown_configuration_is_refused_before_any_run(tmp_path):
    res = run(tmp_path, "--configs", "a-baseline", "a-S7", in_process=True)  # a typo must not shrink the experiment silently
    assert res.returncode == 2 and "invalid choice: 'a-S7'" in res.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "runs").exists() and not (tmp_path / "results").exists()
