"""The demo scripts without a test of their own: bad input is one line and exit 2, and nothing is written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def script(name: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}  # the tests' own HOME and caches (conftest)
    return subprocess.run([sys.executable, str(SCRIPTS / name), *args], capture_output=True, text=True, timeout=300,
                          env=env, cwd=cwd)


def test_training_trajectories_refuses_bad_input_before_training(tmp_path):
    taken = tmp_path / "taken"
    taken.write_text("kept")
    cases = [
        (["--schemes", "absolute", "rope", "--out", "runs", "-o", "t.png"], "error: unknown scheme 'rope' (hint: choose one of"),
        (["--out", "taken/runs"], "error: --out taken/runs cannot be a folder: taken is a file"),
    ]
    for args, start in cases:
        res = script("training_trajectories.py", *args, cwd=tmp_path)
        assert res.returncode == 2 and res.stdout == "", args
        assert len(res.stderr.strip().splitlines()) == 1 and res.stderr.startswith(start), (args, res.stderr)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"] and taken.read_text() == "kept"


def test_attention_vs_weights_refuses_bad_input_before_writing(tmp_path):
    res = script("attention_vs_weights.py", "--model", "org/not-cached", "--out", "results", cwd=tmp_path)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.strip().splitlines() == [
        "error: org/not-cached: not a local path and not in the local Hugging Face cache and HF_HUB_OFFLINE is set "
        "(hint: run once online to fill the Hugging Face cache, or pass a local path)"]
    assert not (tmp_path / "results").exists()
