"""The probes' worker process: the same results as fitting in this process, to the last bit, and a fallback to this
process when the child cannot start or dies."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from dataclasses import dataclass

import numpy as np
import pytest

from posviz.observe.probe import ProbeResult
from posviz.observe.probe_worker import ProbeJob, ProbeWorker, run_jobs


def _jobs(layers: int = 3, blocks: int = 12, k: int = 8, d: int = 24, seed: int = 0) -> list[ProbeJob]:
    """Hidden states with some position in them (a table per layer plus noise), sampled at ``k`` positions."""
    rng = np.random.default_rng(seed)
    positions = np.sort(np.stack([rng.choice(np.arange(1, 31), size=k, replace=False) for _ in range(blocks)]), axis=1)
    jobs = []
    for layer in range(layers):
        table = rng.normal(size=(32, d)) * 2 * (layer + 1)
        states = (table[positions] + rng.normal(size=(blocks, k, d))).astype(np.float32)
        jobs.append(ProbeJob(layer=layer, states=states, positions=positions, middle=15.5, seed=seed, threads=1))
    return jobs


def test_worker_results_equal_this_process_to_the_last_bit():
    jobs = _jobs()
    with ProbeWorker() as worker:
        assert worker._proc is not None  # a real child
        worker.submit(jobs)
        got = worker.results()
    want = run_jobs(jobs)
    assert got == want and sorted(got) == [0, 1, 2]
    assert all(np.isfinite(r.mae) and r.mae < r.mae_baseline for r in got.values())  # not a run of NaNs


def test_no_interpreter_to_start_fits_here(monkeypatch):
    monkeypatch.setattr("sys.executable", "/nonexistent/python")
    jobs = _jobs(layers=1)
    with ProbeWorker() as worker:
        assert worker._proc is None
        worker.submit(jobs)
        assert worker.results() == run_jobs(jobs)


def test_a_child_that_dies_is_replaced_by_this_process():
    jobs = _jobs(layers=2)
    with ProbeWorker() as worker:
        assert worker._proc is not None
        worker._proc.kill()  # as the kernel's out-of-memory killer would
        worker._proc.wait()
        worker.submit(jobs)
        assert worker.results() == run_jobs(jobs)


def test_close_stops_a_child_still_waiting_for_jobs():
    worker = ProbeWorker()
    proc = worker._proc
    assert proc is not None
    worker.close()  # an error in the parent before any job
    assert proc.wait(timeout=60) is not None and proc.returncode != 0


@dataclass(frozen=True)
class _WarningJob(ProbeJob):
    """A job whose fit warns, as a probe that does not converge would."""

    def run(self) -> ProbeResult:
        warnings.warn("lbfgs failed to converge", RuntimeWarning, stacklevel=1)
        return super().run()


def test_the_fits_warnings_reach_this_process(monkeypatch):
    from pathlib import Path

    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[2]))  # the child unpickles a job of tests/
    (job,) = _jobs(layers=1)
    job = _WarningJob(**job.__dict__)
    with ProbeWorker() as worker, pytest.warns(UserWarning, match="RuntimeWarning: lbfgs failed to converge"):
        worker.submit([job])
        worker.results()


def test_the_child_imports_no_torch():
    """The worker must stay light: it runs beside a model, and torch would add its memory and a second of import."""
    code = "import sys, posviz.observe.probe_worker, sklearn.linear_model; print(sorted({'torch', 'transformers'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


SPLIT_CHECK = """
import os, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from tests.integration.test_probe_worker import _jobs, _DyingJob
from posviz.observe.probe_worker import fit_jobs, run_jobs

os.cpu_count = lambda: 2  # two cores, whatever this machine has: the jobs are shared with a forked process
jobs = _jobs(layers=4)
results, messages = fit_jobs(jobs)
assert results == run_jobs(jobs) and list(results) == [0, 1, 2, 3], results  # in the jobs' order, not by process
jobs[1] = _DyingJob(**jobs[1].__dict__, parent=os.getpid())  # the forked process fits odd jobs, and dies on this one
results, messages = fit_jobs(jobs)
assert results == run_jobs(jobs[:1] + _jobs(layers=4)[1:]), results
print("ok")
"""


@dataclass(frozen=True)
class _DyingJob(ProbeJob):
    """A job that kills the process fitting it unless that is ``parent`` (as an out-of-memory kill would)."""

    parent: int = 0

    def run(self) -> ProbeResult:
        import os

        if os.getpid() != self.parent:
            os._exit(9)
        return super().run()


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="the forked second process is POSIX only")
def test_two_processes_share_single_threaded_jobs_and_survive_one_dying():
    """In a fresh interpreter (forking the test process, with torch's threads, would be unsafe)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", SPLIT_CHECK, str(root)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_the_shared_worker_serves_later_calls_and_is_replaced_after_a_failed_one():
    from posviz.observe.probe_worker import probe_worker

    jobs = _jobs(layers=2)
    with probe_worker() as worker:
        worker.submit(jobs)
        first = worker.results()
        pid = worker._proc.pid
    with probe_worker() as again:  # the next call: the same process, scikit-learn already imported
        assert again is worker and again._proc.pid == pid
        again.submit(jobs)
        assert again.results() == first == run_jobs(jobs)
    with pytest.raises(KeyboardInterrupt), probe_worker() as broken:
        broken.submit(jobs)
        raise KeyboardInterrupt  # between submit and results: the answer would be left in the pipe
    assert not broken.alive
    with probe_worker() as fresh:
        assert fresh is not broken and fresh.alive
        fresh.submit(jobs)
        assert fresh.results() == first


def test_a_second_thread_fits_its_probes_here_while_the_worker_is_busy():
    import threading

    from posviz.observe.probe_worker import probe_worker

    jobs, seen = _jobs(layers=1), {}
    with probe_worker() as worker:
        def other() -> None:
            with probe_worker() as mine:
                seen["process"] = mine._proc
                mine.submit(jobs)
                seen["results"] = mine.results()

        thread = threading.Thread(target=other)
        thread.start()
        thread.join(timeout=120)
        assert worker.alive
    assert seen["process"] is None and seen["results"] == run_jobs(jobs)


FORK_CHECK = """
import os, sys
sys.path.insert(0, sys.argv[1])
from tests.integration.test_probe_worker import _jobs
from posviz.observe.probe_worker import probe_worker, run_jobs

jobs = _jobs(layers=1)
with probe_worker() as worker:
    worker.submit(jobs)
    assert worker.results() == run_jobs(jobs)
pid = os.fork()
if pid == 0:  # a forked copy (a DataLoader worker, multiprocessing): its own worker, the parent's untouched
    with probe_worker() as mine:
        ok = mine is not worker and mine.alive and not worker.alive
        mine.submit(jobs)
        ok = ok and mine.results() == run_jobs(jobs)
    os._exit(0 if ok else 1)
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0
with probe_worker() as again:
    assert again is worker and again.alive
    again.submit(jobs)
    assert again.results() == run_jobs(jobs)
print("ok")
"""


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="fork is POSIX only")
def test_a_forked_copy_starts_its_own_worker():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", FORK_CHECK, str(root)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


@pytest.mark.skipif(os.name != "posix", reason="process priorities and groups are POSIX")
def test_a_waiting_parent_gives_the_child_its_priority_where_allowed():
    """The child fits at the lowest priority while the parent runs the model; once the parent waits, it has the
    parent's priority back (where the system lets a process raise one: here, or the test has nothing to check)."""
    jobs = _jobs(layers=1)
    with ProbeWorker() as worker:
        pid = worker._proc.pid
        worker.submit(jobs)
        assert worker.results() == run_jobs(jobs)
        try:
            os.setpriority(os.PRIO_PGRP, pid, 19)
            os.setpriority(os.PRIO_PGRP, pid, os.getpriority(os.PRIO_PROCESS, 0))
        except PermissionError:
            pytest.skip("this user may not raise a process's priority: the starved-child test covers it")
        worker.submit(jobs)
        assert worker.results() == run_jobs(jobs)
        assert os.getpriority(os.PRIO_PGRP, pid) == os.getpriority(os.PRIO_PROCESS, 0) and worker.alive


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="the child's CPU time is read from /proc")
def test_a_starved_child_is_given_up_and_the_batch_fitted_here(monkeypatch):
    """Where the child's priority cannot be raised and other work takes the cores, the parent stops waiting: a stopped
    child (no CPU at all) is the extreme of a starved one, and its batch is fitted here, with the same results."""
    import signal
    import time

    from posviz.observe import probe_worker as module

    def refused(*args: object) -> None:
        raise PermissionError("raising a priority needs privileges")

    monkeypatch.setattr(module.os, "setpriority", refused)
    jobs = _jobs(layers=1)
    with ProbeWorker() as worker:
        proc = worker._proc
        os.kill(proc.pid, signal.SIGSTOP)
        worker.submit(jobs)
        started = time.monotonic()
        assert worker.results() == run_jobs(jobs)
        assert not worker.alive and proc.poll() is not None  # stopped and reaped, not left behind
        waited = time.monotonic() - started
    assert waited >= module.STARVED_AFTER - module.POLL_S  # it waited for the window before giving up
