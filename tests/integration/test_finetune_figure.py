"""Figure 2 with your own runs: ``posviz toeplitzness --plot-vs-glue --run RUN`` for fine-tuned runs.

The runs are real ``posviz train`` runs (session fixtures), copied, with fine-tuning
results written in the documented layout (tests/finetune_results.py); the ALBERT
checkpoints are the planted tiny ALBERTs in a fake offline HF cache.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import numpy as np
import pytest
from safetensors.numpy import load_file
from typer.testing import CliRunner

from posviz.cli.app import app
from tests.figures import by_gid
from tests.finetune_results import ABSOLUTE, mean_of_medians, write_results
from tests.reference import dense_toeplitzness

runner = CliRunner()
TASKS = ["builtin/bshift", "builtin/topic"]


def _log(run) -> list[dict]:
    return json.loads((run / "trajectory.json").read_text())["evaluations"]


def test_fine_tuned_runs_go_on_the_downstream_panel(albert_cache, fine_tuned, absolute_run, tmp_path):
    abs_run, tisa_run = fine_tuned
    svg = tmp_path / "f.svg"
    r = runner.invoke(app, ["toeplitzness", "--plot-vs-glue", "--run", str(abs_run), "--run", str(tisa_run),
                            "--run", str(absolute_run), "-f", "json", "-o", str(svg), "--null-draws", "0"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert [x["kind"] for x in rows] == ["reference"] * 8 + ["run-downstream"] * 3 + ["run"] * 3
    ev = {e["step"]: e for e in _log(abs_run)}
    got = [x for x in rows if x["model"] == str(abs_run)]
    assert [x["step"] for x in got] == [6, 12]
    for x in got:  # x: the log's off-diagonal R² of E_P at that step; y: the mean of the common tasks' medians
        assert x["toeplitzness"] == pytest.approx(ev[x["step"]]["toeplitzness_ep_offdiag"])
        assert x["measure"] == "toeplitzness_ep_offdiag" and x["toeplitzness_from"] == "log"
        assert x["metric_value"] == pytest.approx(mean_of_medians(ABSOLUTE[x["step"]], TASKS))
        assert x["tasks"] == TASKS and x["fine_tuning_seeds"] == 3  # glue/stsb only at step 12: left out
    assert got[0]["metric_value"] == pytest.approx((58 + 71) / 2) and got[1]["metric_value"] == pytest.approx((63 + 74) / 2)
    (tisa,) = [x for x in rows if x["model"] == str(tisa_run)]
    assert tisa["measure"] == "toeplitzness_heads_offdiag_mean" and tisa["metric_value"] == pytest.approx((53 + 67) / 2)
    assert tisa["toeplitzness"] == pytest.approx(_log(tisa_run)[-1]["toeplitzness_heads_offdiag_mean"])
    text = svg.read_text()
    label = f"{abs_run} (absolute; 2 tasks)"
    assert f'id="downstream:{label}"' in text
    assert f'id="downstream-step:{label}:6"' in text and f'id="downstream:{tisa_run} (tisa; mean head R²; 2 tasks)"' in text
    assert f'id="trajectory:{absolute_run} (absolute)"' in text  # no results: the masked-LM panel, as before

    # the table output: one line per fine-tuned run
    r = runner.invoke(app, ["toeplitzness", "--plot-vs-glue", "--run", str(abs_run), "-o", str(tmp_path / "g.png"), "--null-draws", "0"])
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith(f"run {abs_run}"))
    assert line == (f"run {abs_run} (absolute), fine-tuned: Toeplitzness of E_P (off-diagonal R²) {ev[6]['toeplitzness_ep_offdiag']:.4f}"
                    f" → {ev[12]['toeplitzness_ep_offdiag']:.4f}, mean downstream score 64.50 → 68.50 over 2 tasks "
                    "(builtin/bshift, builtin/topic; steps 6 → 12, 2 checkpoints)")


def test_the_figure_has_three_panels_with_their_own_y_axes(albert_cache, fine_tuned, absolute_run):
    from posviz.plots.scatter import plot_toeplitzness_vs_metric
    from posviz.reference.albert import toeplitzness_vs_performance
    from posviz.scoring.cache import ScoreSettings
    from posviz.series.downstream import DOWNSTREAM_YLABEL, run_downstream
    from posviz.series.runs import RUN_METRICS, run_toeplitzness_label, run_trajectory

    abs_run, _ = fine_tuned
    down = run_downstream(abs_run)
    cmp = toeplitzness_vs_performance(settings=ScoreSettings(null_draws=0), progress_label=None)
    fig = plot_toeplitzness_vs_metric(cmp, downstream=[down], trajectories=[run_trajectory(absolute_run).trajectory],
                                      trajectory_ylabel=RUN_METRICS["accuracy"], trajectory_xlabel=run_toeplitzness_label())
    ax_albert, ax_down, ax_mlm = fig.axes[:3]
    assert ax_albert.get_ylabel() == "Average score (%)" and ax_down.get_ylabel() == DOWNSTREAM_YLABEL
    assert ax_mlm.get_ylabel() == "Held-out masked-token accuracy (%)"
    assert ax_down.get_xlabel() == ax_mlm.get_xlabel() == run_toeplitzness_label()
    line = by_gid(fig, f"downstream:{down.trajectory.label}")
    assert line.axes is ax_down
    arrow = by_gid(fig, f"trajectory-end:{down.trajectory.label}")  # the arrow into the later checkpoint, like v1 → v2
    assert arrow.axes is ax_down and arrow.xy == pytest.approx(tuple(line.get_xydata()[-1]))
    ev = {e["step"]: e for e in _log(abs_run)}
    np.testing.assert_allclose(line.get_xydata(), [(ev[s]["toeplitzness_ep_offdiag"], mean_of_medians(ABSOLUTE[s], TASKS)) for s in (6, 12)])
    assert "builtin/bshift, builtin/topic" in fig._supxlabel.get_text().replace("\n", " ")
    assert down.left_out == ("glue/stsb",)


def test_toeplitzness_computed_from_the_checkpoint_when_not_logged(fine_tuned, tmp_path):
    """Steps the log lacks: x from the checkpoint, equal to the log's value and to a dense computation from the file."""
    from posviz.series.downstream import run_downstream

    abs_run, _ = fine_tuned
    run = tmp_path / "run"
    import shutil

    shutil.copytree(abs_run, run)
    doc = json.loads((run / "trajectory.json").read_text())
    logged = {e["step"]: e["toeplitzness_ep_offdiag"] for e in doc["evaluations"]}
    doc["evaluations"] = [e for e in doc["evaluations"] if e["step"] != 6]  # step 6 no longer logged
    (run / "trajectory.json").write_text(json.dumps(doc))
    write_results(run, {3: ABSOLUTE[6]})  # fine-tuned at a step with neither a log entry nor a checkpoint
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        down = run_downstream(run)
    assert any("fine-tuned at step 3" in str(w.message) and "left out" in str(w.message) for w in caught)
    assert down.steps == (6, 12) and down.x_from == ("checkpoint", "log")
    x6 = down.trajectory.points[0][0]
    assert x6 == pytest.approx(logged[6], rel=1e-6, abs=1e-9)
    table = load_file(str(run / "checkpoint-6" / "model.safetensors"))
    e_p = next(v for k, v in table.items() if k.endswith("embeddings.position_embeddings.weight")).astype(np.float64)
    assert x6 == pytest.approx(dense_toeplitzness(e_p, exclude_diagonal=True), rel=1e-6, abs=1e-9)


def test_runs_without_positional_scores_and_bad_runs_are_one_line_errors(albert_cache, fine_tuned, tmp_path, monkeypatch):
    _, tisa_run = fine_tuned
    none_run = tmp_path / "none"
    import shutil

    shutil.copytree(tisa_run, none_run)
    doc = json.loads((none_run / "trajectory.json").read_text())
    doc["run"]["scheme"] = "none"
    (none_run / "trajectory.json").write_text(json.dumps(doc))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    r = runner.invoke(app, ["toeplitzness", "--plot-vs-glue", "--run", str(none_run), "-o", "f.png"])
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert r.exit_code == 2 and len(lines) == 1 and "scheme 'none' has no positional scores" in lines[0], r.output
    assert list(work.iterdir()) == []


def test_subprocess_csv_output(albert_cache, fine_tuned, tmp_path):
    abs_run, _ = fine_tuned
    out = subprocess.run([sys.executable, "-m", "posviz", "toeplitzness", "--plot-vs-glue", "--run", str(abs_run), "-f", "csv",
                          "-o", str(tmp_path / "f.pdf"), "--null-draws", "0"], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    import csv
    import io

    rows = [r for r in csv.DictReader(io.StringIO(out.stdout)) if r["kind"] == "run-downstream"]
    assert [(int(r["step"]), float(r["metric_value"])) for r in rows] == [(6, 64.5), (12, 68.5)]
    assert (tmp_path / "f.pdf").read_bytes().startswith(b"%PDF")
