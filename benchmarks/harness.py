"""Benchmark harness: run whole processes alternately, report medians and ratios.

Each measured command runs in a fresh process under a tiny wrapper that reports
the wall time and the peak resident memory of that process tree
(``RUSAGE_CHILDREN``), so start-up, imports and I/O are all counted, as a user
would experience them.

The step benchmarks (training and fine-tuning steps) time callables in one
process instead: :func:`rotating_times`, :func:`autocast` and :func:`device_label`.
torch is imported only inside those, so the process benchmarks do not load it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

_WRAPPER = (
    "import resource, subprocess, sys, time, json\n"
    "t = time.perf_counter()\n"
    "r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)\n"
    "wall = time.perf_counter() - t\n"
    "u = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "print(json.dumps({'rc': r.returncode, 'wall': wall, 'cpu': u.ru_utime + u.ru_stime, 'peak_kb': u.ru_maxrss,\n"
    "                  'err': r.stderr.decode()[-2000:]}))\n"
)


@dataclass
class Measurement:
    """Repeated wall times (s), CPU times (s, user + system of the process tree) and peak memory (MiB) of one command.

    CPU time is reported beside wall time because it varies less on a shared host; the targets are in wall time.
    """

    name: str
    walls: list[float] = field(default_factory=list)
    peaks: list[float] = field(default_factory=list)
    cpus: list[float] = field(default_factory=list)

    @property
    def wall(self) -> float:
        return statistics.median(self.walls)

    @property
    def cpu(self) -> float:
        return statistics.median(self.cpus) if self.cpus else float("nan")

    @property
    def peak(self) -> float:
        return statistics.median(self.peaks)

    def row(self) -> dict:
        return {
            "name": self.name,
            "wall_median_s": round(self.wall, 3),
            "wall_min_s": round(min(self.walls), 3),
            "wall_max_s": round(max(self.walls), 3),
            "cpu_median_s": round(self.cpu, 3) if self.cpus else "",
            "peak_median_mib": round(self.peak, 1),
            "runs": len(self.walls),
        }


def run_measured(cmd: list[str], env: dict | None = None) -> dict:
    """Run ``cmd`` once; ``wall`` and ``cpu`` seconds and ``peak`` RSS MiB of its process tree. Raises on failure."""
    out = subprocess.run([sys.executable, "-c", _WRAPPER, *cmd], capture_output=True, text=True, env=env)
    res = json.loads(out.stdout)
    if res["rc"] != 0:
        raise RuntimeError(f"command failed ({res['rc']}): {' '.join(cmd)}\n{res['err']}")
    return {"wall": res["wall"], "cpu": res["cpu"], "peak": res["peak_kb"] / 1024}


def run_once(cmd: list[str], env: dict | None = None) -> tuple[float, float]:
    """Run ``cmd`` once; return (wall seconds, peak RSS MiB). Raises on failure."""
    res = run_measured(cmd, env)
    return res["wall"], res["peak"]


def alternate(commands: dict[str, list[str]], repeats: int, env: dict | None = None, warmup: bool = True) -> dict[str, Measurement]:
    """Run each command ``repeats`` times, interleaved (A B A B ...), after one warm-up round."""
    results = {name: Measurement(name) for name in commands}
    if warmup:  # fill the page cache so that neither side pays for the first read alone
        for cmd in commands.values():
            run_once(cmd, env)
    for _ in range(repeats):
        for name, cmd in commands.items():
            res = run_measured(cmd, env)
            results[name].walls.append(res["wall"])
            results[name].peaks.append(res["peak"])
            results[name].cpus.append(res["cpu"])
    return results


def machine() -> str:
    """One line describing this machine."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(next(x for x in Path("/proc/meminfo").read_text().splitlines() if x.startswith("MemTotal")).split()[1])
        mem = f", {kb / 2**20:.0f} GiB RAM"
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} cores{mem}, Python {platform.python_version()}, {platform.system()}"


def markdown_table(rows: list[dict]) -> str:
    """Rows of dicts as a Markdown table."""
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(str(r.get(k, "")) for k in keys) + " |" for r in rows]
    return "\n".join(lines)


def posviz_cmd(*args: str) -> list[str]:
    """The installed console script if present (what users run), else ``python -m posviz``."""
    exe = Path(sys.executable).with_name("posviz")
    return [str(exe), *args] if exe.exists() else [sys.executable, "-m", "posviz", *args]


def now() -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime())


def rotating_times(steps: dict[str, Callable[[], None]], rounds: int, per_round: int, warmup: int,
                   sync: Callable[[], None] = lambda: None) -> dict[str, list[float]]:
    """Seconds per step of each callable, one value per round.

    Every callable first runs ``warmup`` times; then, in each round, each one runs
    ``per_round`` times in a row, in an order rotated by one every round, so that drifts
    in machine load hit all of them alike.

    Parameters
    ----------
    steps
        ``{name: step}``; a step takes no arguments and does one unit of work.
    rounds
        Timed rounds.
    per_round
        Steps timed together in each round (their mean is the round's value).
    warmup
        Untimed steps of each callable before the first round.
    sync
        Waits for queued device work (``torch.cuda.synchronize`` on a GPU), called
        before and after each timed stretch.

    Returns
    -------
    dict[str, list[float]]
        ``{name: [seconds per step in round r for r in range(rounds)]}``, in the order of ``steps``.
    """
    names = list(steps)
    for n in names:
        for _ in range(warmup):
            steps[n]()
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        for n in order:
            sync()
            t = time.perf_counter()
            for _ in range(per_round):
                steps[n]()
            sync()
            times[n].append((time.perf_counter() - t) / per_round)
    return times


def autocast(device: str, precision: str) -> AbstractContextManager:
    """``torch.autocast`` for ``precision`` (``fp32``: disabled, ``bf16``, ``fp16``) on ``device`` (``cpu``, ``cuda[:N]``)."""
    import torch

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    device_type = "cuda" if device.startswith("cuda") else "cpu"
    return torch.autocast(device_type, dtype=dtype, enabled=dtype is not None)


def device_sync(device: str) -> Callable[[], None]:
    """A ``sync`` for :func:`rotating_times`: waits for the GPU's queued work on ``cuda``, nothing on the CPU."""
    import torch

    return torch.cuda.synchronize if device.startswith("cuda") else lambda: None


def device_label(device: str) -> str:
    """The device a step benchmark ran on, for its header: the GPU's name, or the CPU and torch's thread count."""
    import torch

    if device.startswith("cuda"):
        return torch.cuda.get_device_name()
    return f"{platform.processor() or platform.machine()} CPU, {torch.get_num_threads()} thread(s)"


def step_parser(description: str, *, batch_size: int, steps: int, schemes: tuple[str, ...]) -> argparse.ArgumentParser:
    """The options of a step benchmark (model size and batch, rounds, device and precision, schemes, ``--json``)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--size", default="small", choices=("tiny", "small", "base"))
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=batch_size)
    p.add_argument("--vocab-size", type=int, default=30000)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--steps", type=int, default=steps, help="timed steps per model and round")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--device", default="cpu")
    p.add_argument("--precision", default="fp32", choices=("fp32", "bf16", "fp16"))
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (CPU)")
    p.add_argument("--schemes", nargs="+", default=list(schemes))
    p.add_argument("--json", default=None, help="also write the results here")
    return p


def step_times(args: argparse.Namespace, steps: dict[str, Callable[[], None]]) -> dict[str, list[float]]:
    """:func:`rotating_times` of ``steps`` with a step benchmark's options; prints the settings line first."""
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    times = rotating_times(steps, rounds=args.rounds, per_round=args.steps, warmup=args.warmup, sync=device_sync(args.device))
    print(f"size {args.size}, seq {args.seq_len}, batch {args.batch_size}, vocab {args.vocab_size}, {args.precision}, "
          f"{device_label(args.device)}; {args.rounds} rounds x {args.steps} steps, torch {torch.__version__}")
    return times


def write_step_results(args: argparse.Namespace, rows: list[dict]) -> None:
    """Write a step benchmark's settings, device and rows to ``args.json`` (when given)."""
    if args.json:
        Path(args.json).write_text(json.dumps({"settings": vars(args), "device": device_label(args.device), "results": rows}, indent=2))
