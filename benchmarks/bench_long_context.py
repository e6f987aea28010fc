"""Benchmark 16: attention statistics at long context, tiled (the default of ``posviz attention``) against a plain forward.

A LLaMA-shaped model with random weights (the tiny one of issue 41: 4 layers, 8 heads, 2 key-value heads, RoPE,
128 wide; or ``--shape llama-3.2-1b``: 16 layers, 32 heads, 8 key-value heads, 2048 wide, llama3 RoPE scaling)
runs one block of ``n`` random tokens three ways, each in a fresh process so that peaks do not mix:

* ``plain``: the model's own SDPA forward, nothing captured;
* ``tiled``: the same forward inside :class:`~posviz.observe.tiled.capture.TiledCapture` (the chosen layers'
  statistics in tiles), then the statistics themselves; with ``--two-pass`` also ``two-pass``, the same without
  the model's own normalisers (the CPU kernel computes them in a first pass, as where the model's attention is not
  PyTorch's CPU flash kernel);
* ``eager``: ``output_attentions=True`` with eager attention, what ``--exact-maps`` and every tool without tiles
  need; only where its maps fit (``--eager-max``).

Each row gives wall time and peak memory (CPU: the process's own peak RSS, VmHWM; CUDA:
``torch.cuda.max_memory_allocated``) and the ratio of tiled to plain. With ``--repeats R`` each mode runs R times,
the modes alternately, and a row gives the median time and the largest peak. ``--check`` first compares tiled statistics with the eager maps at n = 512 on the
chosen device (1e-5), and the chosen kernel with the PyTorch tiles. ``--kernel`` picks the tiles' kernel
(``POSVIZ_TILED_KERNEL``: ``auto`` takes the fused kernel on a CUDA device with Triton and the compiled C kernel on
the CPU where a C compiler works, ``torch`` the PyTorch tiles, ``triton`` the fused kernel or an error, ``native``
the C kernel or an error). ``--warm R`` instead runs every mode in one process per size, alternately, R rounds each,
and gives the fastest of each (no peaks: one process holds them all); a round of a captured mode is a run of two
blocks, the first making the sums and the second adding to them (what each further block of a run costs), each
timed with the part of it spent in the compiled CPU kernel, then the run's statistics. On a noisy machine the only
way to see a change of 10 %.

Usage::

    .venv/bin/python benchmarks/bench_long_context.py --sizes 2048 8192                  # CPU, tiny model
    .venv/bin/python benchmarks/bench_long_context.py --sizes 2048 8192 --warm 5 --two-pass   # one warm process a size
    python3 benchmarks/bench_long_context.py --device cuda --sizes 2048 8192 32768 --check
    python3 benchmarks/bench_long_context.py --device cuda --sizes 2048 8192 32768 --kernel torch   # the unfused tiles
    python3 benchmarks/bench_long_context.py --device cuda --shape llama-3.2-1b --dtype bfloat16 --sizes 32768 --layers 0
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHAPES = {
    "tiny": dict(hidden_size=128, intermediate_size=256, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2,
                 vocab_size=1000),
    "llama-3.2-1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                         vocab_size=128256, rope_theta=500000.0, tie_word_embeddings=True,
                         rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                       "original_max_position_embeddings": 8192}),
}


def build(shape: str, n: int, device: str, dtype: str):
    import torch
    import transformers

    cfg = transformers.LlamaConfig(max_position_embeddings=max(n, 131072 if shape != "tiny" else n), **SHAPES[shape])
    torch.manual_seed(0)
    with torch.device(device):
        model = transformers.LlamaModel(cfg).to(getattr(torch, dtype)).eval()
    model.set_attn_implementation("sdpa")
    return model


def _block(shape: str, n: int, device: str, dtype: str, layers: str) -> tuple:
    """The model, one block of n random tokens on ``device``, and the layers to capture."""
    import torch

    model = build(shape, n, device, dtype)
    ids = torch.randint(0, model.config.vocab_size, (1, n), generator=torch.Generator().manual_seed(1)).to(device)
    chosen = list(range(model.config.num_hidden_layers)) if layers == "all" else [int(x) for x in layers.split(",")]
    return model, ids, chosen


def _sync(device: str) -> None:
    """Wait for the device's queued work (CUDA), so that a wall time covers it."""
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def _statistics(model, capture, chosen: list[int]) -> None:
    """The statistics of every captured layer, as a run computes them after its blocks."""
    sys.path.insert(0, str(ROOT))
    from posviz.observe.tiled.statistics import layer_statistics

    stats = [layer_statistics(capture.sums[layer], capture.supports[layer]) for layer in chosen]
    assert all(st.entropy.shape == (model.config.num_attention_heads,) for st in stats)


def one(mode: str, shape: str, n: int, device: str, dtype: str, layers: str, tile: int) -> dict:
    """Run one mode in this process; its time and peak."""
    import torch

    sys.path.insert(0, str(ROOT))
    from posviz.observe.tiled.capture import TiledCapture

    model, ids, chosen = _block(shape, n, device, dtype, layers)

    with torch.no_grad():
        model(ids[:, :64])  # warm-up (kernels, allocator)
        if mode in ("tiled", "two-pass"):  # and the statistics' own kernel (the C kernel is compiled or loaded on its first call)
            with TiledCapture(model, chosen, tile=tile):
                model(ids[:, :64])
        _sync(device)
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        if mode == "plain":
            model(ids, use_cache=False)
        elif mode in ("tiled", "two-pass"):
            with TiledCapture(model, chosen, tile=tile, normalisers=mode == "tiled") as capture:
                model(ids, use_cache=False)
            _sync(device)
            after = time.perf_counter()
            _statistics(model, capture, chosen)
        else:
            model.set_attn_implementation("eager")
            out = model(ids, use_cache=False, output_attentions=True)
            assert len(out.attentions) == model.config.num_hidden_layers
        _sync(device)
        wall = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated() if device == "cuda" else _own_peak_rss()
    statistics_s = start + wall - after if mode in ("tiled", "two-pass") else None
    return {"mode": mode, "n": n, "wall_s": wall, "peak_bytes": peak, "statistics_s": statistics_s}


def warm(shape: str, n: int, device: str, dtype: str, layers: str, tile: int, rounds: int, two_pass: bool) -> dict:
    """Time the modes in this one process, alternately, ``rounds`` times each; the fastest of each.

    A captured mode runs two blocks in one capture, as a run does: the first makes the sums, the second adds to them.
    Beside each block's forward: the part of it spent in the compiled CPU kernel (``accumulate_native``, timed around
    each call); then the statistics, which a run over many blocks computes once. One process for every
    mode takes out the start-up and allocator noise that fresh processes add (their medians of three could not
    separate changes of 10 % on a 2-core machine); its peak memory is not each mode's, so none is given.
    """
    import torch

    sys.path.insert(0, str(ROOT))
    import posviz.observe.tiled.native as native
    from posviz.observe.tiled.capture import TiledCapture

    model, ids, chosen = _block(shape, n, device, dtype, layers)
    in_kernel = [0.0]
    original = native.accumulate_native

    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            in_kernel[0] += time.perf_counter() - start

    best: dict[str, float] = {}

    def keep(name: str, seconds: float) -> None:
        best[name] = min(best.get(name, float("inf")), seconds)

    native.accumulate_native = timed  # kernel.accumulate imports it from the module at each call
    try:
        with torch.no_grad():
            model(ids[:, :64])
            with TiledCapture(model, chosen, tile=tile):
                model(ids[:, :64])
            for _ in range(rounds):
                for mode in ("plain", "tiled", *(("two-pass",) if two_pass else ())):
                    _sync(device)
                    in_kernel[0], start = 0.0, time.perf_counter()
                    if mode == "plain":
                        model(ids, use_cache=False)
                        _sync(device)
                        keep("plain", time.perf_counter() - start)
                        continue
                    with TiledCapture(model, chosen, tile=tile, normalisers=mode == "tiled") as capture:
                        model(ids, use_cache=False)  # the first block of a run: its sums are made
                        _sync(device)
                        keep(mode, time.perf_counter() - start)
                        keep(f"{mode} kernel", in_kernel[0])
                        in_kernel[0], start = 0.0, time.perf_counter()
                        model(ids, use_cache=False)  # a further block: added to those sums
                        _sync(device)
                        keep(f"{mode} further", time.perf_counter() - start)
                        keep(f"{mode} further kernel", in_kernel[0])
                    start = time.perf_counter()
                    _statistics(model, capture, chosen)
                    keep(f"{mode} statistics", time.perf_counter() - start)
    finally:
        native.accumulate_native = original
    return {"n": n, **best}


def _own_peak_rss() -> int:
    """This process's peak RSS in bytes: VmHWM where Linux has it (ru_maxrss is kept across execve, so a child would
    start at its parent's peak), else ru_maxrss."""
    import re
    import resource

    try:
        with open("/proc/self/status", encoding="ascii") as f:
            return int(re.search(r"VmHWM:\s+(\d+) kB", f.read()).group(1)) * 1024
    except (OSError, AttributeError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def check(device: str, dtype: str) -> str:
    """Tiled statistics against eager maps at n = 512 on ``device``: the largest difference of any statistic."""
    import numpy as np
    import torch

    sys.path.insert(0, str(ROOT))
    from posviz.observe.statistics import LayerSums
    from posviz.observe.statistics import layer_statistics as dense
    from posviz.observe.tiled.capture import TiledCapture
    from posviz.observe.tiled.statistics import layer_statistics

    model = build("tiny", 512, device, dtype)
    ids = torch.randint(0, 1000, (2, 512), generator=torch.Generator().manual_seed(2)).to(device)
    with torch.no_grad():
        with TiledCapture(model, tile=128) as capture:
            model(ids, use_cache=False)
        chosen = os.environ.pop("POSVIZ_TILED_KERNEL", None)
        os.environ["POSVIZ_TILED_KERNEL"] = "torch"  # the same tiles from PyTorch operations, beside the chosen kernel's
        with TiledCapture(model, tile=128) as unfused:
            model(ids, use_cache=False)
        del os.environ["POSVIZ_TILED_KERNEL"]
        if chosen is not None:
            os.environ["POSVIZ_TILED_KERNEL"] = chosen
        model.set_attn_implementation("eager")
        maps = [a.double().cpu() for a in model(ids, use_cache=False, output_attentions=True).attentions]
    worst = fused = 0.0
    for layer, a in enumerate(maps):
        if unfused is not None:
            for name, value in capture.sums[layer].numpy().items():
                fused = max(fused, float(np.max(np.abs(value - unfused.sums[layer].numpy()[name]))))
        st = layer_statistics(capture.sums[layer], capture.supports[layer])
        ref = dense(LayerSums(2, a.sum(0).numpy(), (a * a).sum((0, 3)).numpy(), (a.sum(-1) ** 2).sum(0).numpy()), True)
        for name in ("toeplitzness_offdiag", "toeplitzness", "null_mean", "positional_share", "positional_share_null", "sink_mass"):
            worst = max(worst, float(np.max(np.abs(getattr(st, name) - getattr(ref, name)))))
        entropy = -(a * torch.log(a.clamp_min(1e-300))).sum(-1).mean(0)[:, 1:].mean(-1).numpy()
        worst = max(worst, float(np.max(np.abs(st.entropy - entropy))))
    also = f"; chosen kernel - PyTorch tiles, every sum: {fused:.2e}"
    return f"check on {device} ({dtype}), n = 512, 2 blocks, 4 layers: largest difference tiled - eager = {worst:.2e}{also}"


def cpu_line() -> str:
    """The CPU's model and its widest vectors (the C kernel's speed against SDPA differs by a factor between AVX2 and
    AVX-512 machines, so a row says which it was measured on); read as the kernel's library hash reads them."""
    import platform

    sys.path.insert(0, str(ROOT))
    from posviz.observe.tiled.native import cpu_lines

    lines = cpu_lines()
    if lines is None:
        return platform.machine() + " " + platform.processor()
    model = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "?")
    flags = {flag for line in lines if line.startswith("flags") for flag in line.split(":", 1)[1].split()}
    widest = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "AVX" if "avx" in flags else "SSE"
    return f"{model}, {os.cpu_count()} logical CPUs, {widest}"


def _ratio(row: dict, mode: str) -> str:
    """``mode``'s median time over the plain forward's, or n/a."""
    return f"{row[mode]['wall_s'] / row['plain']['wall_s']:.1f}" if row.get(mode) and row.get("plain") else "n/a"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[2048, 8192])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    ap.add_argument("--layers", default="all", help="layers captured: 'all' or a list like 0,3")
    ap.add_argument("--tile", type=int, default=256)
    ap.add_argument("--eager-max", type=int, default=4096, help="largest n at which the eager mode runs")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--kernel", choices=("auto", "torch", "triton", "native"), default="auto", help="the tiles' kernel (POSVIZ_TILED_KERNEL)")
    ap.add_argument("--repeats", type=int, default=1, help="processes per mode and size, alternately; the median time is shown")
    ap.add_argument("--two-pass", action="store_true",
                    help="also run the tiles without the model's normalisers (the CPU kernel's two passes), alternately")
    ap.add_argument("--warm", type=int, metavar="R", default=0,
                    help="instead: one process per size, the modes alternately R times each, the fastest shown (no peaks)")
    ap.add_argument("--one", nargs=2, metavar=("MODE", "N"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        if args.one[0] == "warm":
            print(json.dumps(warm(args.shape, int(args.one[1]), args.device, args.dtype, args.layers, args.tile, args.warm,
                                  args.two_pass)))
        else:
            print(json.dumps(one(args.one[0], args.shape, int(args.one[1]), args.device, args.dtype, args.layers, args.tile)))
        return 0
    if args.warm < 0:
        ap.error("--warm takes a number of rounds >= 1")
    os.environ["POSVIZ_TILED_KERNEL"] = args.kernel
    if args.check:
        print(check(args.device, args.dtype), flush=True)
    print(f"\n{args.shape} LLaMA, {args.device}, {args.dtype}, layers captured: {args.layers}, tile {args.tile}, kernel {args.kernel}"
          f"\nCPU: {cpu_line()}\n")
    if args.warm:
        return _warm_table(args)
    extra = " two passes s | two passes / plain |" if args.two_pass else ""
    print("| n | plain s | plain peak GiB | tiled s | of which statistics s | tiled peak GiB | tiled / plain | eager s | eager peak GiB |"
          + extra)
    print("|---|---|---|---|---|---|---|---|---|" + "---|" * (2 if args.two_pass else 0))
    for n in args.sizes:
        runs: dict[str, list[dict]] = {}
        for _ in range(args.repeats):  # the modes alternately, so that a busy spell falls on each
            for mode in ("plain", "tiled", *(("two-pass",) if args.two_pass else ()), "eager"):
                if mode == "eager" and n > args.eager_max:
                    continue
                cmd = [sys.executable, __file__, "--one", mode, str(n), "--device", args.device, "--dtype", args.dtype, "--shape",
                       args.shape, "--layers", args.layers, "--tile", str(args.tile)]
                r = subprocess.run(cmd, capture_output=True, text=True)
                if r.returncode != 0:
                    print(f"({mode} at {n} failed: {(r.stderr.strip().splitlines() or ['?'])[-1]})", file=sys.stderr)
                    continue
                runs.setdefault(mode, []).append(json.loads(r.stdout.strip().splitlines()[-1]))
        row = {mode: {"wall_s": statistics.median(x["wall_s"] for x in got), "peak_bytes": max(x["peak_bytes"] for x in got),
                      "statistics_s": statistics.median(x["statistics_s"] or 0.0 for x in got)}
               for mode, got in runs.items()}
        row.update({mode: None for mode in ("plain", "tiled") if mode not in row})
        cell = {m: (f"{v['wall_s']:.2f}", f"{v['peak_bytes'] / 2**30:.2f}") if v else ("n/a", "n/a") for m, v in row.items()}
        eager = cell.get("eager", ("not run", "not run"))
        two = f" {cell.get('two-pass', ('n/a',))[0]} | {_ratio(row, 'two-pass')} |" if args.two_pass else ""
        stats = f"{row['tiled']['statistics_s']:.2f}" if row.get("tiled") else "n/a"
        print(f"| {n} | {cell['plain'][0]} | {cell['plain'][1]} | {cell['tiled'][0]} | {stats} | {cell['tiled'][1]} | {_ratio(row, 'tiled')} | "
              f"{eager[0]} | {eager[1]} |{two}", flush=True)
    return 0


def _warm_table(args: argparse.Namespace) -> int:
    """The ``--warm`` table: per size, one child process running :func:`warm`."""
    modes = ("tiled", *(("two-pass",) if args.two_pass else ()))
    head = "".join(f" {m}, first block s | / plain | in the kernel s | {m}, a further block s | / plain | in the kernel s |"
                   f" statistics after s |" for m in modes)
    print(f"fastest of {args.warm} rounds in one process per size, the modes alternately; a round of a captured mode is "
          "a run of two blocks (the first makes the sums, the second adds to them), then its statistics\n")
    print("| n | plain s |" + head)
    print("|---|---|" + "---|---|---|---|---|---|---|" * len(modes))
    for n in args.sizes:
        cmd = [sys.executable, __file__, "--one", "warm", str(n), "--warm", str(args.warm), "--device", args.device, "--dtype",
               args.dtype, "--shape", args.shape, "--layers", args.layers, "--tile", str(args.tile),
               *(("--two-pass",) if args.two_pass else ())]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            print(f"(warm at {n} failed: {(r.stderr.strip().splitlines() or ['?'])[-1]})", file=sys.stderr)
            continue
        got = json.loads(r.stdout.strip().splitlines()[-1])
        cells = "".join(f" {got[m]:.3f} | {got[m] / got['plain']:.2f} | {got[m + ' kernel']:.3f} | {got[m + ' further']:.3f} |"
                        f" {got[m + ' further'] / got['plain']:.2f} | {got[m + ' further kernel']:.3f} | {got[m + ' statistics']:.3f} |"
                        for m in modes)
        print(f"| {n} | {got['plain']:.3f} |{cells}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
