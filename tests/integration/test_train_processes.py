"""`posviz train` under `torchrun --nproc_per_node 2` (CPU, gloo): one run folder, written by the main process."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from posviz.cli.app import app
from posviz.toeplitz import score
from tests.conftest import TRAIN_ARGS, made_once, one_torch_thread

ROOT = Path(__file__).parents[2]


def torchrun(*args: str, nproc: int = 2) -> subprocess.CompletedProcess:
    """``python -m torch.distributed.run --standalone`` (a free rendezvous port) running ``python -m posviz``."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc), "-m", "posviz", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture(scope="module")
def two_process_run(train_corpus, tmp_path_factory):
    """The run of the ``absolute_run`` fixture (same options), trained by two processes (once per test run, whichever
    worker asks first: the tests only read it), and the finished ``torchrun`` (its output)."""
    def make(folder: Path) -> None:
        proc = torchrun("train", "--scheme", "absolute", "--corpus", str(train_corpus), "--out", str(folder / "abs"), *TRAIN_ARGS)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        (folder / "stdout.txt").write_text(proc.stdout, encoding="utf-8")
        (folder / "stderr.txt").write_text(proc.stderr, encoding="utf-8")

    folder = made_once(tmp_path_factory, "two-process-run", make)
    proc = subprocess.CompletedProcess(["torchrun"], 0, (folder / "stdout.txt").read_text(encoding="utf-8"),
                                       (folder / "stderr.txt").read_text(encoding="utf-8"))
    return folder / "abs", proc


@pytest.mark.slow
def test_two_processes_write_one_run_folder(two_process_run, absolute_run):
    from posviz.models import positional_scores
    from posviz.read.manifests import MANIFEST, checkpoint_problem

    out, proc = two_process_run
    assert proc.stdout.count("run         ") == 1, proc.stdout  # only the main process reports
    assert "2 processes, cpu fp32, global batch 16" in proc.stdout
    assert "error:" not in proc.stderr and "Traceback" not in proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint-12", "checkpoint-6", "run.json", "tokenizer", "trajectory.csv", "trajectory.json"]
    run = json.loads((out / "run.json").read_text())
    assert (run["world_size"], run["batch_size"], run["global_batch_size"]) == (2, 8, 16)

    # Both checkpoints complete, with both processes' RNG states in their manifests.
    for step in (6, 12):
        ckpt = out / f"checkpoint-{step}"
        assert checkpoint_problem(ckpt) is None
        assert {"rng_state_0.pth", "rng_state_1.pth"} <= set(json.loads((ckpt / MANIFEST).read_text())["files"])
    # Each step took 16 blocks: 8 per process (epochs count each process's share of the batches).
    state = json.loads((out / "checkpoint-12" / "trainer_state.json").read_text())
    per_process_batches = math.ceil(math.ceil(run["train_blocks"] / 8) / 2)
    assert state["epoch"] == pytest.approx(12 / per_process_batches)

    doc = json.loads((out / "trajectory.json").read_text())
    evals = doc["evaluations"]
    assert [r["step"] for r in evals] == [0, 6, 12] and doc["run"]["world_size"] == 2
    # Step 0: same initial weights as the one-process run; the held-out set, split over two processes
    # and gathered, gives the same accuracy (counted over tokens) and Toeplitzness. The loss is a mean
    # of batch means, and accelerate completes the last, short held-out batch with repeated blocks.
    single = json.loads((absolute_run / "trajectory.json").read_text())["evaluations"][0]
    assert evals[0]["eval_accuracy"] == single["eval_accuracy"]
    assert evals[0]["eval_loss"] == pytest.approx(single["eval_loss"], rel=1e-2)
    assert evals[0]["toeplitzness_ep"] == pytest.approx(single["toeplitzness_ep"], rel=1e-12, abs=1e-12)
    assert run["data_fingerprint"] == json.loads((absolute_run / "run.json").read_text())["data_fingerprint"]
    # The logged Toeplitzness is the saved checkpoint's.
    heads = score(positional_scores(str(out / "checkpoint-12")), null=False).toeplitzness
    np.testing.assert_allclose(evals[-1]["toeplitzness_heads"], heads, rtol=1e-6, atol=1e-6)  # R² in [0, 1]
    res = CliRunner().invoke(app, ["toeplitzness", str(out / "checkpoint-12"), "--format", "json", "--null-draws", "0"])
    assert res.exit_code == 0 and json.loads(res.stdout)[0]["toeplitzness"] == pytest.approx(evals[-1]["toeplitzness_ep"], rel=1e-9, abs=1e-9)


@pytest.mark.slow
def test_a_two_process_run_resumes_in_one_process(two_process_run, tmp_path):
    import shutil


    src, _ = two_process_run
    out = tmp_path / "abs"
    shutil.copytree(src, out)
    with one_torch_thread():
        res = CliRunner().invoke(app, ["train", "--resume", "--out", str(out), "--steps", "18"])
    assert res.exit_code == 0, res.output
    assert "resumed from checkpoint-12" in res.stdout
    assert "warning: the run last ran in 2 process(es) (global batch 16) and resumes in 1 (global batch 8)" in res.stderr
    evals = json.loads((out / "trajectory.json").read_text())["evaluations"]
    assert [r["step"] for r in evals] == [0, 6, 12, 18]
    assert json.loads((out / "run.json").read_text())["world_size"] == 1


@pytest.mark.slow
def test_a_user_error_stops_every_process_with_one_line(train_corpus, absolute_run, tmp_path):
    proc, codes = driven("none", tmp_path / "codes", "train", "--scheme", "absolute", "--corpus", str(train_corpus),
                         "--out", str(absolute_run), *TRAIN_ARGS)
    assert proc.returncode != 0
    errors = [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("error:")]
    assert errors == [f"error: {absolute_run} already exists and is not empty "
                      "(hint: pass --resume to continue that run, or choose another --out)"], proc.stderr
    # Both processes exit as the CLI does on user errors: none aborted (SIGABRT) or terminated by the launcher.
    assert_left_with(proc, codes, 2)


@pytest.mark.slow
def test_an_option_error_stops_every_process_with_one_line(tmp_path):
    """Raised in every process before they have met: they meet only to leave together, so none is terminated."""
    proc, codes = driven("none", tmp_path / "codes", "train", "--corpus", str(tmp_path / "texts.txt"))
    assert [line for line in proc.stderr.splitlines() if line.startswith("error:")] == [
        "error: give --scheme (hint: for example: posviz train --scheme tisa)"], proc.stderr
    assert_left_with(proc, codes, 2)


def driven(event: str, codes: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict[str, str]]:
    """``posviz ARGS`` in two processes through tests/train_exit_driver.py, which plants ``event`` (or ``none``)
    and records every process's exit code in ``codes``; the run and ``{"rank-0": code, "rank-1": code}``."""
    codes.mkdir()
    driver = Path(__file__).parents[1] / "train_exit_driver.py"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(driver), event, str(codes), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    return proc, {f.name: f.read_text() for f in codes.iterdir()}


def _planted(event: str, corpus, tmp_path) -> tuple[subprocess.CompletedProcess, dict[str, str]]:
    """A two-process run with ``event`` planted in the main process at step 6 (tests/train_exit_driver.py)."""
    return driven(event, tmp_path / "codes", "train", "--scheme", "absolute", "--corpus", str(corpus), "--out", str(tmp_path / "run"),
                  *TRAIN_ARGS)


def assert_left_with(proc: subprocess.CompletedProcess, codes: dict[str, str], code: int) -> None:
    """Every process ended with ``code`` and the main one first (the launcher names it the root cause); none was
    killed by a signal or aborted. Older launchers (torch 2.2) list only the process that failed first."""
    assert codes == {"rank-0": str(code), "rank-1": str(code)}, proc.stderr
    root = proc.stderr.split("Root Cause", 1)[-1]
    assert "rank      : 0" in root and f"exitcode  : {code}" in root, proc.stderr
    assert "Signal" not in proc.stderr and "SIGABRT" not in proc.stderr and "terminate called" not in proc.stderr, proc.stderr


@pytest.mark.slow
def test_ctrl_c_stops_every_process_with_one_line(train_corpus, tmp_path):
    """Ctrl-C reaches torchrun, which forwards SIGINT to every process: each ends as interrupted (130), one line."""
    proc, codes = _planted("interrupt", train_corpus, tmp_path)
    assert proc.returncode != 0
    assert codes == {"rank-0": "130", "rank-1": "130"}, proc.stderr
    lines = (proc.stdout + proc.stderr).splitlines()
    assert [line for line in lines if line.startswith("error:")] == ["error: interrupted; no output was written"], proc.stderr
    assert not [line for line in lines if line.startswith("[rank")], proc.stderr  # no process printed a traceback
    assert "terminate called" not in proc.stderr and "SIGABRT" not in proc.stderr


@pytest.mark.slow
def test_a_bug_in_the_main_process_stops_every_process(train_corpus, tmp_path):
    """The main process keeps its traceback; the other one, blocked in a collective, ends with the same code (1)."""
    proc, codes = _planted("bug", train_corpus, tmp_path)
    assert_left_with(proc, codes, 1)  # the launcher's own summary may list one process or both: not counted
    assert proc.stderr.count("RuntimeError: a planted bug") == 1 and "[rank1]" not in proc.stderr, proc.stderr
    assert "terminate called" not in proc.stderr and not [line for line in proc.stderr.splitlines() if line.startswith("error:")]


def test_every_parameter_of_every_scheme_gets_a_gradient():
    """Trainer's DDP runs with ``find_unused_parameters=False``: a parameter without a gradient would stop it."""
    import torch

    from posviz.models import SIZES, PosvizAlbertConfig, PosvizForMaskedLM
    from posviz.models.configuration_posviz import SCHEMES

    ids = torch.randint(5, 60, (2, 12), generator=torch.Generator().manual_seed(0))
    for scheme in SCHEMES:
        for groups in (1, SIZES["tiny"]["num_hidden_layers"]):
            config = PosvizAlbertConfig(vocab_size=60, max_position_embeddings=12, position_scheme=scheme, num_hidden_groups=groups, **SIZES["tiny"])
            model = PosvizForMaskedLM(config)
            model(input_ids=ids, labels=ids).loss.backward()
            assert [n for n, p in model.named_parameters() if p.grad is None] == [], (scheme, groups)
