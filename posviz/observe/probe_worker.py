"""Fit the position probes (:mod:`posviz.observe.probe`) in a child process, beside the forward passes.

In one process the probes cost `posviz hidden` a fixed 2 s on a small model: importing
scikit-learn (1.3 s: it imports scipy.stats and pandas) and 14 small fits (0.9 s), after
the forward passes. Both hold the GIL, so a thread would stall the forward passes' Python
instead. So a child process (``python -m posviz.observe.probe_worker``; it imports no
torch) does them:

* it starts before the model loads, and imports scikit-learn while the parent loads the
  model (mostly one core);
* it receives the probe's sample as soon as it is complete (the sampled blocks run first,
  :func:`~posviz.observe.hidden_sums.accumulate_hidden`) and fits at the lowest CPU
  priority: in whatever the forward passes leave (all of it when they run on a GPU);
* once the parent waits for it, it gets the parent's priority back where the system allows it (a privileged user,
  ``RLIMIT_NICE``). Where it does not, a child starved by other work on a busy machine (at the lowest priority it
  gets about 1.5 % of a core beside each busy process, so 1 s of fits took 90 s in the test suite) is given up:
  the parent fits the batch itself;
* it shares single-threaded fits with a forked second process (two cores, half the time);
* it is kept for the next call in the same process (a series, a notebook), so
  scikit-learn is imported once.

The child runs :func:`~posviz.observe.probe.position_probe` on the same arrays, on the
same number of BLAS threads, so its results equal the in-process ones to the last bit
(tested). A child that cannot start or dies is not an error: the probes are then fitted
in the parent. The protocol is pickles on pipes: a batch of jobs on the child's stdin,
its results and the warnings the fits raised on its stdout. benchmarks/README.md,
section 12, has the measurements.
"""

from __future__ import annotations

import atexit
import os
import pickle
import subprocess
import sys
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from posviz.observe.probe import ProbeResult


@dataclass(frozen=True)
class ProbeJob:
    """The probes of one layer: :func:`~posviz.observe.probe.position_probe`'s arguments, and its BLAS threads."""

    layer: int
    states: np.ndarray
    positions: np.ndarray
    middle: float
    seed: int
    threads: int | None

    def run(self) -> ProbeResult:
        """Fit the probes here, on ``threads`` BLAS threads (``None``: the library's default)."""
        from threadpoolctl import threadpool_limits

        from posviz.observe.probe import position_probe

        with threadpool_limits(limits=self.threads, user_api="blas"):
            return position_probe(self.states, self.positions, self.middle, seed=self.seed)


def run_jobs(jobs: list[ProbeJob]) -> dict[int, ProbeResult]:
    """Fit every job in this process, one layer after another."""
    return {job.layer: job.run() for job in jobs}


#: While the parent waits, the child's CPU use is read this often (s); a child that used less than
#: :data:`STARVED_SHARE` of the wall time over :data:`STARVED_AFTER` seconds is starved.
POLL_S = 0.25
STARVED_AFTER = 2.0
STARVED_SHARE = 0.1


class ProbeWorker:
    """A child process that fits batches of probe jobs, one batch at a time, for as long as it lives.

    :meth:`submit` a batch as soon as the probe's sample is complete and collect it with
    :meth:`results`. Whatever goes wrong with the child (it cannot start, it dies),
    :meth:`results` fits the batch in this process instead. ``start=False`` makes a
    worker that always fits here.
    """

    def __init__(self, *, start: bool = True) -> None:
        self._owner = os.getpid()
        self._proc: subprocess.Popen[bytes] | None = None
        self._jobs: list[ProbeJob] = []
        self._writer: threading.Thread | None = None
        self.pending = False  # a batch was submitted and its answer not yet read
        if start:
            try:  # a process group of its own: the fits' forked second process is reniced and stopped with it
                self._proc = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE,
                                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=_child_env(),
                                              start_new_session=os.name == "posix")
            except OSError:  # no interpreter to start (embedded Python, a sandbox): fit here
                self._proc = None

    def __enter__(self) -> ProbeWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def alive(self) -> bool:
        """Whether the child runs and belongs to this process (a forked copy of the parent must not use it)."""
        return self._proc is not None and self._proc.poll() is None and os.getpid() == self._owner

    def submit(self, jobs: list[ProbeJob]) -> None:
        """Hand a batch to the child; the pipe is written on a thread, so a child still importing does not block."""
        if self.pending:
            raise RuntimeError("the previous batch's results were not collected")
        self._jobs = list(jobs)
        if not self.alive or self._proc is None or self._proc.stdin is None:
            return
        payload = pickle.dumps(self._jobs, protocol=pickle.HIGHEST_PROTOCOL)
        self._writer = threading.Thread(target=_write, args=(self._proc.stdin, payload), daemon=True)
        self._writer.start()
        self.pending = True

    def results(self) -> dict[int, ProbeResult]:
        """Each submitted layer's probes: the child's, or fitted here when the child failed."""
        answer = self._receive()
        if answer is None:
            return run_jobs(self._jobs)
        results, caught = answer
        for message in caught:  # the fits' warnings (e.g. a probe that did not converge), raised here
            warnings.warn(message, UserWarning, stacklevel=2)
        return results

    def _receive(self) -> tuple[dict[int, ProbeResult], list[str]] | None:
        if not self.pending or self._proc is None or self._proc.stdout is None or self._writer is None:
            return None
        if self._hurry():
            self._writer.join()
        elif _starves(self._proc, self._writer):
            self.close()
            return None
        try:
            answer = pickle.load(self._proc.stdout)
        except (EOFError, OSError, pickle.UnpicklingError):  # the child died (killed, out of memory)
            self.close()
            return None
        self.pending = False
        return answer

    def _hurry(self) -> bool:
        """Give the child (and its forked second process) this process's CPU priority; whether the system allowed it."""
        if self._proc is None or os.name != "posix":
            return False
        try:
            os.setpriority(os.PRIO_PGRP, self._proc.pid, os.getpriority(os.PRIO_PROCESS, 0))
        except OSError:  # raising a priority needs privileges (or RLIMIT_NICE); the child may be gone
            return False
        return True

    def close(self) -> None:
        """Stop the child (idle, or busy with a batch nobody will collect)."""
        proc, self._proc = self._proc, None
        self.pending = False
        if proc is None or os.getpid() != self._owner:  # a forked copy leaves its parent's child alone
            return
        if proc.poll() is None:
            if os.name == "posix":  # the child and the fits' forked second process
                import signal

                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except OSError:
                    proc.kill()
            else:
                proc.kill()
            proc.wait()
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                stream.close()


_shared: ProbeWorker | None = None
_shared_lock = threading.Lock()


@contextmanager
def probe_worker() -> Iterator[ProbeWorker]:
    """This process's worker for one ``posviz.hidden`` call: started at the first call and kept for the next ones
    (a series, a notebook), so scikit-learn is imported once per process. A call on another thread while one runs
    fits its probes here. A call that fails between :meth:`~ProbeWorker.submit` and
    :meth:`~ProbeWorker.results` stops the worker, so no later call reads its answer."""
    global _shared
    if not _shared_lock.acquire(blocking=False):
        yield ProbeWorker(start=False)
        return
    try:
        if _shared is None or not _shared.alive:
            _shared = ProbeWorker()
        worker = _shared
        try:
            yield worker
        finally:
            if worker.pending:
                worker.close()
    finally:
        _shared_lock.release()


@atexit.register
def _close_shared() -> None:
    if _shared is not None:
        _shared.close()


def _cpu_seconds(pid: int) -> float | None:
    """CPU time a process has used (user + system), from ``/proc``; ``None`` where there is no ``/proc``."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def _starves(proc: subprocess.Popen[bytes], writer: threading.Thread) -> bool:
    """Wait until the child has read its batch and started to answer; whether it starved first (it used less than
    :data:`STARVED_SHARE` of a core over :data:`STARVED_AFTER` s). Without ``/proc`` it is never judged starved."""
    import select
    import time

    if proc.stdout is None or _cpu_seconds(proc.pid) is None:  # no /proc (macOS, Windows): wait as long as it takes
        writer.join()
        return False
    window: list[tuple[float, float]] = []
    while True:
        if writer.is_alive():  # a starved child does not even read its batch: the pipe stays full
            writer.join(POLL_S)
        elif select.select([proc.stdout], [], [], POLL_S)[0]:
            return False
        used = _cpu_seconds(proc.pid)
        if used is None:  # it exited: reading its answer finds out how
            writer.join()
            return False
        now = time.monotonic()
        window = [(t, c) for t, c in window if now - t <= STARVED_AFTER] + [(now, used)]
        start, first = window[0]
        if now - start >= STARVED_AFTER - POLL_S and used - first < STARVED_SHARE * (now - start):
            return True


def _child_env() -> dict[str, str]:
    """This environment, with posviz's own folder first on PYTHONPATH (the parent may have found it by sys.path)."""
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env


def _write(stream: IO[bytes], payload: bytes) -> None:
    try:
        stream.write(payload)
        stream.flush()
    except (OSError, ValueError):  # the child is gone (or was stopped): results() finds no answer and fits here
        pass


def _fit_recording(jobs: list[ProbeJob]) -> tuple[dict[int, ProbeResult], list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = run_jobs(jobs)
    return results, [f"{w.category.__name__}: {w.message}" for w in caught]


def fit_jobs(jobs: list[ProbeJob]) -> tuple[dict[int, ProbeResult], list[str]]:
    """Fit ``jobs`` and record their warnings; single-threaded jobs are shared with a forked second process when
    there are two cores (each fit is one BLAS thread and mostly Python, so two processes halve the time)."""
    split = hasattr(os, "fork") and len(jobs) > 1 and (os.cpu_count() or 1) > 1 and all(j.threads == 1 for j in jobs)
    if not split:
        results, messages = _fit_recording(jobs)
        return results, list(dict.fromkeys(messages))
    mine, theirs = jobs[0::2], jobs[1::2]
    read, write = os.pipe()
    with warnings.catch_warnings():  # BLAS's idle threads make Python warn of fork; the forked process uses none
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the second process: fit its share, hand it back, exit at once
        os.close(read)
        try:
            with os.fdopen(write, "wb") as out:
                pickle.dump(_fit_recording(theirs), out, protocol=pickle.HIGHEST_PROTOCOL)
        finally:
            os._exit(0)
    os.close(write)
    results, messages = _fit_recording(mine)
    with os.fdopen(read, "rb") as inp:
        try:
            other, more = pickle.load(inp)
        except (EOFError, pickle.UnpicklingError):  # the second process died: fit its share here
            other, more = _fit_recording(theirs)
    os.waitpid(pid, 0)
    merged = {**results, **other}
    return {job.layer: merged[job.layer] for job in jobs}, list(dict.fromkeys(messages + more))  # in the jobs' order


def main() -> None:
    """The child: import scikit-learn at once, then fit the jobs read from stdin and write the results to stdout."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it stops this process
    if hasattr(os, "nice"):  # yield the cores to the parent's forward passes; take what they leave
        os.nice(19)
    import sklearn.linear_model  # noqa: F401  (the import is the point: it overlaps the parent's model loading)
    import sklearn.model_selection  # noqa: F401
    import sklearn.pipeline  # noqa: F401

    while True:  # one batch after another, until the parent closes the pipe
        try:
            jobs: list[Any] = pickle.load(sys.stdin.buffer)
        except EOFError:
            break
        pickle.dump(fit_jobs(jobs), sys.stdout.buffer, protocol=pickle.HIGHEST_PROTOCOL)
        sys.stdout.buffer.flush()
    os._exit(0)  # skip tearing down scikit-learn, scipy and pandas


if __name__ == "__main__":
    main()
