"""A finished multi-process run ends even when torch's process-group teardown hangs (pytorch/pytorch#75097)."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_a_hanging_destroy_after_success_ends_the_process_with_0():
    # destroy_process_group replaced by one that never returns: the watchdog flushes what was printed and ends with 0
    code = textwrap.dedent("""
        import threading
        import torch.distributed as dist
        from posviz.train import processes

        dist.destroy_process_group = lambda: threading.Event().wait()
        print("the run's output", flush=False)
        processes._bounded_destroy(limit=0.2)
        print("not reached")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "the run's output\n"


def test_a_destroy_that_returns_leaves_the_process_running():
    code = textwrap.dedent("""
        import torch.distributed as dist
        from posviz.train import processes

        calls = []
        dist.destroy_process_group = lambda: calls.append(1)
        processes._bounded_destroy(limit=0.2)
        import time
        time.sleep(0.5)  # past the limit: the watchdog, told the teardown returned, does nothing
        print("still here", len(calls))
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "still here 1\n"
