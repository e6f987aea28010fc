"""Benchmark 3: closed-form Toeplitzness vs the dense computation.

For n = 512, 2048, 8192, 32768 positions and d = 768: the closed form
(``toeplitzness(embeddings=E)``: FFT diagonal sums, P never built) against the
dense path (build P = E Eᵀ, then score it), where dense fits in memory. Reports
median time over repeats, peak traced memory, and the relative difference.
"""

from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc

import numpy as np

from posviz.toeplitz import gram, toeplitzness


def _timed(fn, repeats: int):
    times, peaks, value = [], [], None
    for _ in range(repeats):
        tracemalloc.start()
        t = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - t)
        peaks.append(tracemalloc.get_traced_memory()[1] / 2**20)
        tracemalloc.stop()
    return statistics.median(times), min(times), max(times), statistics.median(peaks), value


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", type=int, nargs="+", default=[512, 2048, 8192, 32768])
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--dense-max", type=int, default=8192, help="largest n scored densely")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    rows = []
    toeplitzness(embeddings=np.ones((8, 2)) + np.eye(8, 2))  # warm-up: first scipy.fft call pays its import
    for n in args.sizes:
        rng = np.random.default_rng(n)
        # learned-looking embeddings: smooth positional structure plus noise
        e = np.cos(np.outer(np.arange(n), rng.uniform(0, 0.2, args.dim))) + 0.3 * rng.normal(size=(n, args.dim))
        c_med, c_min, c_max, c_peak, c_val = _timed(lambda e=e: toeplitzness(embeddings=e, method="closed"), args.repeats)
        row = {
            "benchmark": f"3. closed form, n={n}, d={args.dim}",
            "closed s (min–max)": f"{c_med:.3f} ({c_min:.3f}–{c_max:.3f})",
            "closed peak MiB": f"{c_peak:.0f}",
        }
        if n <= args.dense_max:
            d_med, d_min, d_max, d_peak, d_val = _timed(lambda e=e: toeplitzness(gram(e)), max(1, args.repeats if n <= 2048 else 1))
            row.update(
                {
                    "dense s (min–max)": f"{d_med:.3f} ({d_min:.3f}–{d_max:.3f})",
                    "dense peak MiB": f"{d_peak:.0f}",
                    "speed-up": f"{d_med / c_med:.1f}×",
                    "rel. diff": f"{abs(c_val - d_val) / abs(d_val):.1e}",
                }
            )
        else:
            row.update({"dense s (min–max)": f"n/a (P would be {n * n * 8 / 2**30:.0f} GiB)", "dense peak MiB": "", "speed-up": "", "rel. diff": ""})
        row["R²"] = f"{c_val:.12f}"
        rows.append(row)
    return rows


if __name__ == "__main__":
    from harness import markdown_table

    print(markdown_table(main()))
