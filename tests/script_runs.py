"""Reruns of a script under test in the test's own process, for what follows a script test's first, real run.

A script test runs the script once as a program (a real interpreter, as a user starts it). What it checks after that,
a rerun that finds its results and skips, or a refusal of other settings, needs the same ``main(argv)``, not another
interpreter importing torch and transformers for a few seconds each time.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any


def load_script(script: Path, name: str | None = None) -> Any:
    """The module of ``script`` (a file of ``scripts/``), imported under ``name`` (default: one made from its stem) and
    registered in ``sys.modules``, where its dataclasses look their module up."""
    name = name or f"_script_under_test_{script.stem}"
    spec = importlib.util.spec_from_file_location(name, script)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def run_script(script: Path, argv: list[str], *, in_process: bool = False) -> subprocess.CompletedProcess:
    """``script`` with ``argv`` as a program: its own interpreter, one thread, matplotlib's Agg backend, output captured
    (``in_process``: :func:`run_in_process`, for runs that train nothing)."""
    if in_process:
        return run_in_process(script, argv)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    return subprocess.run([sys.executable, str(script), *argv], capture_output=True, text=True, timeout=600, env=env)


def run_in_process(script: Path, argv: list[str]) -> subprocess.CompletedProcess:
    """``script``'s ``main(argv)`` here, one torch thread (as ``OMP_NUM_THREADS=1``), its output captured.

    Parameters
    ----------
    script
        A script of ``scripts/`` with a ``main(argv) -> int``.
    argv
        Its arguments.

    Returns
    -------
    subprocess.CompletedProcess
        Its exit status (``main``'s return value, argparse's exit, or 1 and the traceback for an exception that
        escapes), stdout and stderr, as a process would give them.
    """
    from tests.conftest import one_torch_thread

    module = load_script(script)
    out, err, environ = io.StringIO(), io.StringIO(), dict(os.environ)
    try:
        with one_torch_thread(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = module.main(argv)
            except SystemExit as e:  # argparse refuses an option
                code = e.code if isinstance(e.code, int) else 1
            except Exception:  # what a process would print before exiting with status 1
                traceback.print_exc()
                code = 1
    finally:
        os.environ.clear()  # a script may set a variable for itself (CUDA_VISIBLE_DEVICES)
        os.environ.update(environ)
    return subprocess.CompletedProcess([str(script), *argv], code, out.getvalue(), err.getvalue())
