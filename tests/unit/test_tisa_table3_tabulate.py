"""scripts/tisa_table3_tabulate.py on run folders holding fine-tuning results: every file, every number by hand."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from posviz.finetuning.results import median_records, results_path, write_document
from tests.script_runs import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "tisa_table3_tabulate.py"


@pytest.fixture(scope="module")
def script():
    return load_script(SCRIPT, "tisa_table3_tabulate")


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
                                         "tupe.md", "overview.md", "score-by-step.csv", "score-by-step.json", "score-by-step.png",
                                         "figure2.csv", "figure2.json", "figure2.md", "figure2.png"}
    rows = json.loads((results / "table3.json").read_text())
    bshift = next(r for r in rows if r["task"] == "builtin/bshift")
    assert (bshift["baseline"], bshift["baseline min"], bshift["baseline max"], bshift["baseline n"]) == (60, 50, 70, 3)
    assert bshift["S=3"] == 64 and bshift["S=1"] is None and bshift["abs_delta"] == 4 and bshift["delta_pct"] == pytest.approx(10.0)
    md = (results / "table3.md").read_text()
    assert "| builtin/bshift | 60.0 (50.0–70.0) | – | 64.0 (62.0–66.0) | – | 4.0 | 10.0% |" in md
    tupe = next(r for r in json.loads((results / "tupe.json").read_text()) if r["task"] == "builtin/bshift")
    assert (tupe["absolute"], tupe["TUPE-A"], tupe["delta"]) == (60, 70, 10)
    overview = (results / "overview.md").read_text().splitlines()  # one column per configuration, absent ones "–"
    assert overview[0].startswith("| task | (a) absolute | + TISA S=1 | S=3 | S=5 | (b) none |") and overview[0].endswith("| TUPE-A |")
    assert overview[2] == "| bshift (word order) | 60.0 (50.0–70.0) | – | 64.0 (62.0–66.0) | – | – | – | – | – | 70.0 (68.0–72.0) |"
    assert [line.split(" | ")[0] for line in overview[2:]] == ["| bshift (word order)", "| average"]
    curve = list(csv.DictReader((results / "score-by-step.csv").open()))
    got = [(r["config"], int(r["step"]), float(r["mean"]), float(r["min"]), float(r["max"])) for r in curve]
    assert got == [("a-baseline", 50, 50.0, 40.0, 60.0), ("a-baseline", 100, 60.0, 50.0, 70.0),
                   ("tupe-A", 50, 56.0, 55.0, 57.0), ("tupe-A", 100, 70.0, 68.0, 72.0)]
    assert (results / "table3.png").stat().st_size > 10_000


def test_no_results_is_one_error_line(tmp_path):
    r = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "none"), "--results", str(tmp_path / "r")],
                       capture_output=True, text=True, check=False)
    assert r.returncode == 2 and r.stderr.startswith("error: no fine-tuning results under") and not (tmp_path / "r").exists()


def test_readmes_quote_the_shipped_tables():
    """The READMEs quote the shipped results tables as tabulated, not hand-edited copies."""
    root, results = SCRIPT.parents[1], SCRIPT.parents[1] / "reports" / "tisa-table3"
    assert (results / "overview.md").read_text() in (root / "README.md").read_text()
    assert (results / "figure2.md").read_text() in (results / "README.md").read_text()


def log(run: Path, scheme: str, evaluations: list[dict]) -> None:
    """A training log as ``posviz train`` writes it (the fields Figure 2 reads; the full R² beside the off-diagonal one)."""
    for r in evaluations:
        if "toeplitzness_ep_offdiag" in r:
            r["toeplitzness_ep"] = r["toeplitzness_ep_offdiag"] + 0.01
    (run / "trajectory.json").write_text(json.dumps({"run": {"scheme": scheme}, "evaluations": evaluations}))


def test_figure2_rows_and_paths_from_the_logs(script, tmp_path):
    out = tmp_path / "runs"
    base, s3, tisa, bare = out / "a-baseline-s0", out / "a-S3-s0", out / "b-S1-s0", out / "a-S3-s1"
    write(base, 50, "builtin/shuffled", [70.0, 50.0, 74.0])  # median 70
    write(base, 100, "builtin/shuffled", [50.0, 51.0, 72.0])  # median 51
    write(base, 100, "builtin/replaced", [64.0])
    log(base, "absolute", [{"step": 0, "toeplitzness_ep_offdiag": 0.03},
                           {"step": 50, "toeplitzness_ep_offdiag": 0.1, "null_ep_offdiag": 0.02, "eval_accuracy": 0.1},
                           {"step": 100, "toeplitzness_ep_offdiag": 0.35, "null_ep_offdiag": 0.03, "eval_accuracy": 0.13,
                            "toeplitzness_heads_offdiag_mean": 0.07}])
    write(s3, 100, "builtin/shuffled", [93.0])
    write(s3, 100, "builtin/replaced", [68.0])
    log(s3, "absolute+tisa", [{"step": 100, "toeplitzness_ep_offdiag": 0.46, "null_ep_offdiag": 0.028}])
    write(tisa, 100, "builtin/shuffled", [83.0])
    log(tisa, "tisa", [{"step": 100, "toeplitzness_heads_offdiag_mean": 1.0}])
    write(bare, 100, "builtin/shuffled", [90.0])  # no log: scores only, not on the figure

    rows, fig = script.figure2(script.runs_by_config(out), ["a-baseline"])
    by_run = {r["run"]: r for r in rows}
    assert sorted(by_run) == ["a-S3-s0", "a-S3-s1", "a-baseline-s0", "b-S1-s0"]
    b = by_run["a-baseline-s0"]  # the last fine-tuned step, its log line, the mean of the task medians
    assert (b["step"], b["toeplitzness_ep"], b["null_ep"], b["mlm_accuracy"], b["toeplitzness_heads_mean"]) == (100, 0.35, 0.03, 0.13, 0.07)
    assert (b["score builtin/shuffled"], b["score builtin/replaced"], b["mean_score"], b["tasks"]) == (51.0, 64.0, 57.5, 2)
    assert by_run["b-S1-s0"]["toeplitzness_ep"] is None and by_run["b-S1-s0"]["toeplitzness_heads_mean"] == 1.0
    assert by_run["a-S3-s1"]["toeplitzness_ep"] is None and by_run["a-S3-s1"]["mean_score"] == 90.0

    assert script.figure2_markdown(rows).splitlines()[2:] == [  # configurations with E_P and a log, runs by seed
        "| absolute | 0 | 0.350 | 57.5 |", "| absolute + TISA S = 3 | 0 | 0.460 | 80.5 |"]
    left, right = fig.axes[:2]
    points = {a.get_gid(): a.get_offsets().tolist() for a in left.collections if a.get_gid() and a.get_gid().startswith("runs:")}
    assert points == {"runs:a-baseline": [[0.35, 57.5]], "runs:a-S3": [[0.46, 80.5]]}  # runs with E_P and a log only
    band = next(p for p in left.patches if p.get_gid() == "null-band")
    assert band.get_x() == pytest.approx(0.028) and band.get_width() == pytest.approx(0.002)
    path = next(line for line in right.lines if line.get_gid() == "downstream:a-baseline-s0 (absolute; 1 task)")
    assert path.get_xydata().tolist() == [[0.1, 70.0], [0.35, 51.0]]  # shuffled alone: the task of every fine-tuned step
    assert path.get_color() == points_color(left, "runs:a-baseline")  # one colour per configuration on both panels
    assert right.get_ylabel().startswith("Score on builtin/shuffled (%)")


def points_color(ax, gid: str) -> str:
    """The colour of the scatter points with ``gid``, as a hex string."""
    from matplotlib.colors import to_hex

    return to_hex(next(a for a in ax.collections if a.get_gid() == gid).get_facecolor()[0])
