"""scripts/tisa_table3_tabulate.py on run folders holding fine-tuning results: every file, every number by hand."""

from __future__ import annotations

import csv
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from posviz.finetune.results import median_records, results_path, write_document

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "tisa_table3_tabulate.py"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("tisa_table3_tabulate", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write(run: Path, step: int, task: str, values: list[float]) -> None:
    seeds = [{"source": str(run), "step": step, "task": task, "seed": i, "metric": "score", "value": v} for i, v in enumerate(values)]
    write_document(results_path(run, task, step), {"source": str(run), "step": step, "task": task, "records": seeds + median_records(seeds)})


def test_tables_and_curve_from_run_folders(script, tmp_path):
    out, results = tmp_path / "runs", tmp_path / "results"
    # arm (a): baseline seeds 0-2, S3 seeds 0-1; TUPE-A seeds 0-1 along pre-training; arm (b) absent
    for seed, v in enumerate([60.0, 50.0, 70.0]):
        write(out / f"a-baseline-s{seed}", 100, "builtin/bshift", [v, v + 2, v - 2])  # median v
        write(out / f"a-baseline-s{seed}", 50, "builtin/bshift", [v - 10])
    for seed, v in enumerate([66.0, 62.0]):
        write(out / f"a-S3-s{seed}", 100, "builtin/bshift", [v])
    for seed, (early, late) in enumerate([(55.0, 72.0), (57.0, 68.0)]):
        write(out / f"tupe-A-s{seed}", 50, "builtin/bshift", [early])
        write(out / f"tupe-A-s{seed}", 100, "builtin/bshift", [late])
    (out / "notes").mkdir()  # not a run folder
    runs = script.runs_by_config(out)
    assert sorted(runs) == ["a-S3", "a-baseline", "tupe-A"] and len(runs["a-baseline"]) == 3

    written = script.tabulate(runs, results)
    assert {p.name for p in written} == {"table3.csv", "table3.json", "table3.md", "table3.png", "tupe.csv", "tupe.json",
                                         "tupe.md", "score-by-step.csv", "score-by-step.json", "score-by-step.png"}
    rows = json.loads((results / "table3.json").read_text())
    bshift = next(r for r in rows if r["task"] == "builtin/bshift")
    assert (bshift["baseline"], bshift["baseline min"], bshift["baseline max"], bshift["baseline n"]) == (60, 50, 70, 3)
    assert bshift["S=3"] == 64 and bshift["S=1"] is None and bshift["abs_delta"] == 4 and bshift["delta_pct"] == pytest.approx(10.0)
    md = (results / "table3.md").read_text()
    assert "| builtin/bshift | 60.0 (50.0–70.0) | – | 64.0 (62.0–66.0) | – | 4.0 | 10.0% |" in md
    tupe = next(r for r in json.loads((results / "tupe.json").read_text()) if r["task"] == "builtin/bshift")
    assert (tupe["absolute"], tupe["TUPE-A"], tupe["delta"]) == (60, 70, 10)
    curve = list(csv.DictReader((results / "score-by-step.csv").open()))
    got = [(r["config"], int(r["step"]), float(r["mean"]), float(r["min"]), float(r["max"])) for r in curve]
    assert got == [("a-baseline", 50, 50.0, 40.0, 60.0), ("a-baseline", 100, 60.0, 50.0, 70.0),
                   ("tupe-A", 50, 56.0, 55.0, 57.0), ("tupe-A", 100, 70.0, 68.0, 72.0)]
    assert (results / "table3.png").stat().st_size > 10_000


def test_no_results_is_one_error_line(tmp_path):
    r = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "none"), "--results", str(tmp_path / "r")],
                       capture_output=True, text=True, check=False)
    assert r.returncode == 2 and r.stderr.startswith("error: no fine-tuning results under") and not (tmp_path / "r").exists()
