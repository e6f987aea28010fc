"""scripts/hidden_schemes.py end to end at a toy budget: train, measure with posviz hidden, tabulate beside the none rows."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "hidden_schemes.py"


def test_runs_are_measured_and_tabulated_with_the_none_rows(tmp_path):
    none_csv = Path(__file__).resolve().parents[2] / "reports" / "hidden-known-facts" / "none-bidirectional.csv"
    cmd = [sys.executable, str(SCRIPT), "--out", str(tmp_path / "runs"), "--results", str(tmp_path / "results"),
           "--schemes", "absolute", "--seeds", "0", "--steps", "2", "--none", str(none_csv)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"})
    assert res.returncode == 0, res.stderr
    with open(tmp_path / "results" / "hidden-schemes.csv", encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["scheme"], r["seed"], r["layer"]) for r in rows] == [("absolute", "0", str(layer)) for layer in range(5)]
    # a learned table puts position into the input: layer 0's share is far above its null even after 2 steps
    assert float(rows[0]["positional_share"]) > 5 * float(rows[0]["positional_share_null"])
    table = (tmp_path / "results" / "table.md").read_text(encoding="utf-8").splitlines()
    assert sum(line.startswith("| absolute | ") for line in table) == 5
    assert sum(line.startswith("| none (bidirectional") and "| 3 |" in line for line in table) == 5  # 3 seeds each
    assert (tmp_path / "results" / "figure.png").stat().st_size > 10_000
