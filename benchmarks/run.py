"""Run every posviz benchmark and print its table (Markdown).

Usage::

    .venv/bin/python benchmarks/run.py            # all of them, full size (about an hour on 2 cores)
    .venv/bin/python benchmarks/run.py --quick    # smaller inputs, fewer repeats (a few minutes)
    .venv/bin/python benchmarks/run.py extract startup   # a selection

Each benchmark builds its own inputs (random weights with real architectures'
shapes, saved with ``save_pretrained`` under ``benchmarks/work/``, which is not
committed) and times posviz against the alternative as whole processes,
alternately. Results and the machine they were measured on go to
``benchmarks/README.md`` by hand, so that every number there was looked at.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from harness import machine

HERE = Path(__file__).parent

# name -> (script, full arguments, quick arguments)
BENCHMARKS: dict[str, tuple[str, list[str], list[str]]] = {
    "extract": ("bench_extract.py", ["--repeats", "5"], ["--repeats", "2"]),
    "startup": ("bench_startup.py", ["--repeats", "15"], ["--repeats", "5"]),
    "closed-form": ("bench_closed_form.py", ["--repeats", "3"], ["--sizes", "512", "2048", "8192", "32768", "--dense-max", "2048", "--repeats", "1"]),
    "heads": ("bench_heads.py", ["--repeats", "3"], ["--repeats", "1", "--no-dense"]),
    "train-step": ("bench_train_step.py", ["--size", "small", "--seq-len", "128", "--batch-size", "8", "--vocab-size", "8000"],
                   ["--size", "tiny", "--seq-len", "128", "--batch-size", "8", "--rounds", "3", "--steps", "2"]),
    "finetune-step": ("bench_finetune_step.py", ["--size", "small", "--seq-len", "128", "--batch-size", "16", "--vocab-size", "8000"],
                      ["--size", "tiny", "--seq-len", "64", "--batch-size", "16", "--vocab-size", "8000", "--rounds", "3", "--steps", "2"]),
    "report": ("bench_report.py", ["--runs", "3"], ["--runs", "1"]),
    "hub": ("bench_hub.py", ["--repeats", "3"], ["--quick"]),
    "rope-70b": ("bench_rope_70b.py", ["--repeats", "3"], ["--repeats", "1"]),
    "series": ("bench_series.py", [], ["--workers", "8"]),
    "attention": ("bench_attention.py", ["--blocks", "8", "--repeats", "3"], ["--blocks", "2", "--repeats", "1"]),
    "hidden": ("bench_hidden.py", ["--blocks", "256", "--repeats", "3"], ["--blocks", "16", "--repeats", "1"]),
    "explore": ("bench_explore.py", ["--repeats", "5"], ["--repeats", "1"]),
    "extrapolate": ("bench_extrapolate.py", ["--layers", "12", "--heads", "12", "--hidden", "768", "--blocks", "16", "--repeats", "2"],
                    ["--blocks", "2", "--length", "128", "--repeats", "1"]),
    "teardown": ("bench_teardown.py", ["--launches", "20"], ["--launches", "3"]),
    "text-pass": ("bench_text_pass.py", ["--blocks", "64", "--repeats", "3"], ["--blocks", "8", "--repeats", "1"]),
    "long-context": ("bench_long_context.py", ["--sizes", "2048", "8192", "--check"], ["--sizes", "1024", "--eager-max", "1024"]),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", help=f"benchmarks to run (default: all): {', '.join(BENCHMARKS)}")
    ap.add_argument("--quick", action="store_true", help="smaller inputs and fewer repeats")
    args = ap.parse_args(argv)
    unknown = [n for n in args.names if n not in BENCHMARKS]
    if unknown:
        ap.error(f"unknown benchmark(s): {', '.join(unknown)}")
    print(f"# posviz benchmarks — {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n\nMachine: {machine()}\n")
    failed = []
    for name in args.names or list(BENCHMARKS):
        script, full, quick = BENCHMARKS[name]
        print(f"## {name}\n", flush=True)
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, str(HERE / script), *(quick if args.quick else full)], cwd=HERE, text=True, capture_output=True)
        print(r.stdout.strip())
        if r.returncode != 0:
            failed.append(name)
            print(f"\n(failed with exit code {r.returncode})\n```\n{r.stderr[-3000:]}\n```")
        print(f"\n({time.perf_counter() - t0:.0f} s)\n", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
