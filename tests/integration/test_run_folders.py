"""A ``posviz train`` run folder as MODEL: ``RUN`` is its newest complete checkpoint, ``RUN@STEP`` one step.

The run is the shared 12-step ``absolute_run`` (conftest.py; checkpoints 6 and 12).
Tests that damage a run work on a copy.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from posviz.cli.app import app

REPO = Path(__file__).resolve().parents[2]


def cli(*args: str, cwd: Path | None = None):
    old = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        return CliRunner().invoke(app, list(args))
    finally:
        os.chdir(old)


def scores(*args: str) -> list[dict]:
    res = cli(*args, "--format", "json")
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def numbers(rows: list[dict]) -> list[dict]:
    """Every number of the rows (provenance strings aside)."""
    return [{k: v for k, v in r.items() if isinstance(v, (int, float, list)) and not isinstance(v, bool)} for r in rows]


def files(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_size for p in folder.rglob("*") if p.is_file()}


@pytest.fixture
def run_copy(absolute_run, tmp_path) -> Path:
    """A copy of the shared run that a test may damage."""
    return Path(shutil.copytree(absolute_run, tmp_path / "run"))


def test_run_scores_its_newest_checkpoint_and_says_which(absolute_run):
    run = str(absolute_run)
    via_run = scores("toeplitzness", run)
    direct = scores("toeplitzness", str(absolute_run / "checkpoint-12"), "--no-cache")  # computed again, not read back
    assert numbers(via_run) == numbers(direct)
    assert len(numbers(via_run)[0]) >= 12  # toeplitzness, off-diagonal, null, excess, sizes, rows, ...
    row = via_run[0]
    assert row["model"] == run  # what was typed
    assert row["source"] == f"run {run}, checkpoint-12 (step 12)" and row["revision"] == "checkpoint-12"
    assert direct[0]["source"] == f"path {absolute_run / 'checkpoint-12'}"


def test_run_at_step_is_that_checkpoint(absolute_run):
    run = str(absolute_run)
    at6 = scores("toeplitzness", f"{run}@6")
    assert numbers(at6) == numbers(scores("toeplitzness", str(absolute_run / "checkpoint-6"), "--no-cache"))
    assert at6[0]["toeplitzness"] != scores("toeplitzness", run)[0]["toeplitzness"]  # another step, other weights
    assert at6[0]["model"] == f"{run}@6" and at6[0]["source"] == f"run {run}, checkpoint-6 (step 6)"
    assert at6[0]["revision"] == "checkpoint-6"
    assert numbers(scores("toeplitzness", f"{run}@12")) == numbers(scores("toeplitzness", run))


def test_corrupt_newest_checkpoint_falls_back_to_the_previous_complete_one(run_copy):
    with open(run_copy / "checkpoint-12" / "model.safetensors", "r+b") as fh:
        fh.truncate(1000)
    res = cli("toeplitzness", str(run_copy), "--format", "json")
    assert res.exit_code == 0, res.output
    assert f"warning: {run_copy}: skipping checkpoint-12 (model.safetensors has 1000 bytes instead of" in res.stderr
    rows = json.loads(res.stdout)
    assert rows[0]["source"] == f"run {run_copy}, checkpoint-6 (step 6)"
    assert numbers(rows) == numbers(scores("toeplitzness", str(run_copy / "checkpoint-6"), "--no-cache"))
    # heads resolves the run once per layer: one warning all the same, and checkpoint-6's maps
    again = Path(shutil.copytree(run_copy, run_copy.parent / "again"))
    res = cli("heads", str(again), "--layers", "all", "--format", "json")
    assert res.exit_code == 0, res.output
    assert res.stderr.count("warning:") == 1 and "skipping checkpoint-12" in res.stderr
    assert numbers(json.loads(res.stdout)) == numbers(scores("heads", str(again / "checkpoint-6"), "--layers", "all"))
    # an unfinished newest checkpoint (no manifest yet, as while training) is skipped too
    (run_copy / "checkpoint-12" / "posviz-manifest.json").unlink()
    assert scores("toeplitzness", str(run_copy))[0]["revision"] == "checkpoint-6"



def test_report_reads_the_same_checkpoint_of_a_run_as_the_other_commands(run_copy):
    from posviz.report.runs import final_checkpoint

    assert final_checkpoint(run_copy) == run_copy / "checkpoint-12"
    with open(run_copy / "checkpoint-12" / "model.safetensors", "r+b") as fh:
        fh.truncate(1000)  # corrupt, though its manifest is there
    with pytest.warns(UserWarning, match="skipping checkpoint-12"):
        assert final_checkpoint(run_copy) == run_copy / "checkpoint-6"
    for c in ("checkpoint-6", "checkpoint-12"):
        (run_copy / c / "posviz-manifest.json").unlink()
    assert final_checkpoint(run_copy) is None  # no complete checkpoint: the report says so on the run's pages


def test_heads_of_a_run_pick_its_checkpoint_once_for_all_layers(absolute_run, monkeypatch):
    from posviz.read import sources

    calls = []
    real = sources.run_checkpoint
    monkeypatch.setattr(sources, "run_checkpoint", lambda *a, **k: calls.append(a) or real(*a, **k))
    rows = scores("heads", str(absolute_run), "--layers", "all")
    assert len({r["layer"] for r in rows}) > 1  # several layers were read...
    assert len(calls) == 1  # ...from the one checkpoint chosen once (a checkpoint saved meanwhile cannot mix in)

def test_heatmap_and_heads_take_a_run(absolute_run, tmp_path):
    res = cli("heatmap", str(absolute_run), "-o", str(tmp_path / "x.png"))
    assert res.exit_code == 0, res.output
    assert (tmp_path / "x.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    heads = scores("heads", str(absolute_run), "--layer", "0")
    direct = scores("heads", str(absolute_run / "checkpoint-12"), "--layer", "0")
    assert len(heads) == 4 and numbers(heads) == numbers(direct)
    assert {r["model"] for r in heads} == {str(absolute_run)}
    assert {r["source"] for r in heads} == {f"run {absolute_run}, checkpoint-12 (step 12)"}
    at6 = scores("heads", f"{absolute_run}@6", "--layer", "0")
    assert numbers(at6) == numbers(scores("heads", str(absolute_run / "checkpoint-6"), "--layer", "0"))


def test_relative_run_at_step_in_a_subprocess(absolute_run):
    """``abs@6`` looks like a hub id with a revision; the local run folder wins (offline, no Hub touched)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]), "HF_HUB_OFFLINE": "1"}
    name = absolute_run.name
    proc = subprocess.run([sys.executable, "-m", "posviz", "toeplitzness", f"{name}@6", "--format", "json"],
                          cwd=absolute_run.parent, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert rows[0]["model"] == f"{name}@6" and rows[0]["source"] == f"run {name}, checkpoint-6 (step 6)"
    assert numbers(rows) == numbers(scores("toeplitzness", str(absolute_run / "checkpoint-6"), "--no-cache"))
    bad = subprocess.run([sys.executable, "-m", "posviz", "toeplitzness", f"{name}@7"],
                         cwd=absolute_run.parent, capture_output=True, text=True, env=env, timeout=300)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.splitlines() == [f"error: {name}@7: {name} kept no checkpoint of step 7 (kept steps: 6, 12)"]


def test_provenance_survives_the_score_cache(absolute_run):
    scores("toeplitzness", str(absolute_run / "checkpoint-12"))  # fills the cache under the checkpoint's own name
    row = scores("toeplitzness", str(absolute_run))[0]  # same weights: a cache hit
    assert row["model"] == str(absolute_run) and row["revision"] == "checkpoint-12"


def _no_checkpoint(run: Path) -> str:
    for c in run.glob("checkpoint-*"):
        shutil.rmtree(c)
    return str(run)


def _unfinished(run: Path) -> str:
    (run / "checkpoint-6" / "posviz-manifest.json").unlink()
    with open(run / "checkpoint-12" / "model.safetensors", "r+b") as fh:
        fh.truncate(1000)
    return str(run)


def _model_folder(run: Path) -> str:
    return f"{run / 'checkpoint-6'}@6"


BAD = [
    ("no checkpoint", _no_checkpoint, "{run}: this posviz train run has no checkpoint yet"),
    ("no complete checkpoint", _unfinished,
     "{run}: this posviz train run has no complete checkpoint; skipped 2 incomplete or corrupt checkpoint(s) "
     "(checkpoint-12: model.safetensors has 1000 bytes instead of"),
    ("step not kept", lambda run: f"{run}@7", "{run}@7: {run} kept no checkpoint of step 7 (kept steps: 6, 12)"),
    ("step not a number", lambda run: f"{run}@abc", "{run}@abc: the text after @ must be a step number (kept steps: 6, 12)"),
    ("corrupt step", lambda run: (_unfinished(run), f"{run}@12")[1], "{run}@12: checkpoint-12 of {run} is incomplete or corrupt"),
    ("@step on a model folder", _model_folder, "is not a posviz train run folder (no run.json or trajectory.json)"),
]


@pytest.mark.parametrize("command", ["toeplitzness", "heatmap", "heads"])
@pytest.mark.parametrize("name,make,expected", BAD, ids=[b[0] for b in BAD])
def test_bad_run_references_fail_with_one_line(name, make, expected, command, run_copy, tmp_path):
    spec = make(run_copy)
    work = tmp_path / "work"
    work.mkdir()
    before = files(run_copy)
    args = {"toeplitzness": [spec], "heatmap": [spec, "-o", "x.png"], "heads": [spec, "--layer", "0", "-o", "h.png"]}[command]
    res = cli(command, *args, cwd=work)
    assert res.exit_code == 2, res.output
    lines = [x for x in res.output.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), res.output
    assert expected.format(run=run_copy) in lines[0]
    assert "Traceback" not in res.output
    assert list(work.iterdir()) == [] and files(run_copy) == before  # nothing written anywhere


def test_hub_ids_with_a_revision_still_go_to_the_hub(albert_cache, tmp_path):
    """``org/name@rev`` stays a hub id, even where a local folder ``org/name`` exists (it is not a run)."""
    from posviz.read.sources import looks_like_hub_id, resolve_source
    from tests.albert_planted import hub_id

    repo = hub_id("base", "v2")
    (tmp_path / repo).mkdir(parents=True)  # an existing local folder, not a run: "@main" is a hub revision
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert looks_like_hub_id(f"{repo}@main")
        source = resolve_source(f"{repo}@main")
    finally:
        os.chdir(old)
    assert source.kind == "hub" and source.repo_id == repo and source.run is None
