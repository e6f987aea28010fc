"""The process group's teardown: a hang ends the process loudly, even one that holds the GIL (torch < 2.8 joins
gloo's threads holding it); a teardown that returns lets go of the collectives' tensors and leaves the process alone."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_a_teardown_that_hangs_holding_the_gil_ends_the_process_with_1_and_its_stack():
    # destroy_process_group replaced by a C call that never returns and never lets go of the GIL (ctypes.PyDLL keeps
    # it), as ProcessGroupGloo's destructor does: no Python thread could end the process, faulthandler's C timer does
    code = textwrap.dedent("""
        import ctypes
        import torch.distributed as dist
        from posviz.train import processes

        dist.destroy_process_group = lambda: ctypes.PyDLL(None).pause()
        print("the run's output", flush=True)
        processes._bounded_destroy(limit=0.5)
        print("not reached")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr
    assert r.stdout == "the run's output\n"
    assert "Timeout (0:00:00.500000)!" in r.stderr
    assert "in _bounded_destroy" in r.stderr  # the stack says where it hung


def test_a_teardown_that_returns_releases_the_held_tensors_and_leaves_the_process_running():
    code = textwrap.dedent("""
        import time
        import torch
        import torch.distributed as dist
        from posviz.train import collectives, processes

        calls = []
        dist.destroy_process_group = lambda: calls.append(len(collectives._HELD))
        collectives._HELD.append(torch.zeros(3))
        processes._bounded_destroy(limit=0.2)
        time.sleep(0.6)  # past the limit: the timer was cancelled when the teardown returned
        print("still here", calls, len(collectives._HELD))
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "still here [1] 0\n"  # held during the teardown, let go after it
