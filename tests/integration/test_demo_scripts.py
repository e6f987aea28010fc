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
        (["--schemes", "absolute", "spiral", "--out", "runs", "-o", "t.png"], "error: unknown scheme 'spiral' (hint: choose one of"),
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


def test_nope_causal_script_writes_one_row_per_model_and_layer(tmp_path):
    """scripts/nope_causal.py at toy size: NoPE and learned-position GPT-2s, every layer measured on held-out blocks."""
    import csv

    from posviz.train.corpus import DEMO_CORPUS, packaged_corpus

    corpus = tmp_path / "docs.txt"
    corpus.write_text("\n\n".join(packaged_corpus(DEMO_CORPUS, 80)), encoding="utf-8")
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(SCRIPTS / "nope_causal.py"), "--corpus", str(corpus), "--steps", "2",
                           "--seeds", "0", "--seq-len", "16", "--out", str(out)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader((out / "nope-causal.csv").open(encoding="utf-8")))
    assert [(r["scheme"], r["layer"]) for r in rows] == [(s, str(layer)) for s in ("nope", "learned") for layer in range(5)]
    assert all(r["excluded_positions"] == "0,15" for r in rows)  # [CLS] and [SEP] close every block
