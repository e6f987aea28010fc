"""Benchmark 15: the multi-process teardown under load (target: no launch hangs with posviz's object collectives).

Each launch is ``torchrun --nproc_per_node 2`` of this file as a worker: it gathers a few hundred
rows (as ``posviz trajectory --measure hidden`` does), meets the other process at a barrier and
destroys the process group, with CPU-bound processes beside it (``--load``). The worker gathers
either with torch's ``all_gather_object`` or with :func:`posviz.train.collectives.all_gather_objects`,
alternately. A launch that has not ended after ``--limit`` seconds is killed and counted as hung.

Under torch < 2.8 the group's destructor joins gloo's threads holding the GIL, and one of them may
still have to take it to free a tensor of the gather that Python already let go of: a deadlock.
``--switch`` raises Python's GIL switch interval in the workers, so that the main thread does not
hand the GIL over on its own between the gather and the teardown, as on a loaded machine.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

WAYS = ("torch", "posviz")


def worker(way: str, switch: float) -> None:
    """One process of a launch: gather, meet, tear down."""
    sys.setswitchinterval(switch)
    import torch.distributed as dist

    from posviz.train.collectives import all_gather_objects, release_held

    dist.init_process_group("gloo")
    rows = [{"layer": i, "x": i * 1.5, "series": "run · layer 0" * 4} for i in range(200)]
    if way == "torch":
        parts: list = [None] * dist.get_world_size()
        dist.all_gather_object(parts, rows)
    else:
        parts = all_gather_objects(rows)
    merged = sorted((r for p in parts for r in p), key=lambda r: r["layer"])
    dist.barrier()
    dist.destroy_process_group()
    release_held()
    print(len(merged))


def launch(way: str, switch: float, limit: float) -> bool:
    """One two-process launch; True when it ended in time with exit status 0."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", __file__,
           "--worker", way, "--switch", str(switch)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        return proc.wait(timeout=limit) == 0
    except subprocess.TimeoutExpired:
        for pid in [proc.pid, *_descendants(proc.pid)]:  # the launcher and its workers (in sessions of their own)
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        proc.wait()
        return False


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid``, from /proc (Linux)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--launches", type=int, default=20, help="launches of each way")
    ap.add_argument("--load", type=int, default=4, help="CPU-bound processes beside the launches")
    ap.add_argument("--switch", type=float, default=100.0, help="the workers' GIL switch interval, s (Python's: 0.005)")
    ap.add_argument("--limit", type=float, default=40.0, help="seconds after which a launch counts as hung")
    ap.add_argument("--worker", choices=WAYS, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(args.worker, args.switch)
        return []
    import torch

    load = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.load)]
    ended = {way: 0 for way in WAYS}
    start = time.perf_counter()
    try:
        for _ in range(args.launches):
            for way in WAYS:
                ended[way] += launch(way, args.switch, args.limit)
    finally:
        for p in load:
            p.kill()
            p.wait()
    minutes = (time.perf_counter() - start) / 60
    return [{"benchmark": "15. teardown under load", "torch": torch.__version__, "way": way,
             "launches": args.launches, "hung": args.launches - ended[way], "load": args.load,
             "GIL switch s": f"{args.switch:g}", "minutes (all)": f"{minutes:.1f}",
             "target: none hangs": ("met" if ended[way] == args.launches else "missed") if way == "posviz" else "-"}
            for way in WAYS]


if __name__ == "__main__":
    from harness import markdown_table

    rows = main()
    if rows:
        print(markdown_table(rows))
