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
    import torch

    name = f"_script_under_test_{script.stem}"
    spec = importlib.util.spec_from_file_location(name, script)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    out, err, environ, threads = io.StringIO(), io.StringIO(), dict(os.environ), torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = module.main(argv)
            except SystemExit as e:  # argparse refuses an option
                code = e.code if isinstance(e.code, int) else 1
            except Exception:  # what a process would print before exiting with status 1
                traceback.print_exc()
                code = 1
    finally:
        torch.set_num_threads(threads)
        os.environ.clear()  # a script may set a variable for itself (CUDA_VISIBLE_DEVICES)
        os.environ.update(environ)
    return subprocess.CompletedProcess([str(script), *argv], code, out.getvalue(), err.getvalue())
