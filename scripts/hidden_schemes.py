"""Where does position live, layer by layer, in posviz's own schemes? ``posviz hidden`` on briefly trained runs.

Trains tiny masked-LM runs (``posviz train --size tiny --steps 300 --seq-len 64``, the packaged demo corpus) of the
schemes ``absolute``, ``tisa``, ``alibi`` and ``t5`` with ``--seeds`` (0 1 2), the budget of
``scripts/none_bidirectional.py`` (whose ``none`` runs complete the set), and measures every layer of each with
``posviz hidden`` on 256 blocks of 64 tokens: positional share and its null, Toeplitzness of P_l, rank, and the
position and order probes.

Usage (from the repository root)::

    .venv/bin/python scripts/hidden_schemes.py --out runs/hidden-schemes --results reports/hidden-schemes
    # quick check: --steps 5 --seeds 0 --schemes alibi

Writes ``RESULTS/hidden-schemes.csv`` (one row per scheme, seed and layer, the fields of ``posviz hidden --format
json``) and, with the ``none`` rows of ``--none CSV`` when that file exists, ``RESULTS/table.md`` (mean ± sd over
seeds) and ``RESULTS/figure.png``. Finished runs in ``--out`` are reused; a run's measurement is redone only if its
rows are missing.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from pathlib import Path

SCHEMES = ("absolute", "tisa", "alibi", "t5")
LABELS = {"absolute": "absolute", "tisa": "TISA (S = 5, no E_P)", "alibi": "ALiBi", "t5": "T5 bias",
          "none": "none (bidirectional, posviz train)"}
FIELDS = ("positional_share", "positional_share_null", "toeplitzness_offdiag", "toeplitzness_null_offdiag", "rank90",
          "probe_mae", "probe_mae_baseline", "probe_order_accuracy")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("runs/hidden-schemes"), help="folder of the runs")
    p.add_argument("--results", type=Path, default=Path("reports/hidden-schemes"), help="folder of the CSV, table and figure")
    p.add_argument("--none", type=Path, default=Path("reports/hidden-known-facts/none-bidirectional.csv"),
                   help="the none runs' rows (scripts/none_bidirectional.py), same budget (default: %(default)s)")
    p.add_argument("--schemes", nargs="+", default=list(SCHEMES), choices=SCHEMES)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--phase", default="all", choices=("all", "tabulate"))
    return p.parse_args(argv)


def measure(args: argparse.Namespace) -> list[dict]:
    """Train (or reuse) every run and measure it; the CSV rows."""
    import torch

    from posviz.observe.hidden import hidden
    from posviz.train import TrainOptions, train
    from posviz.train.corpus import DEMO_CORPUS
    from posviz.train.log import load_run_log

    torch.set_num_threads(1)
    rows = []
    for seed in args.seeds:
        for scheme in args.schemes:
            out = args.out / f"{scheme}-s{seed}"
            try:
                done = load_run_log(out)["evaluations"][-1]["step"] == args.steps
            except Exception:  # noqa: BLE001 - no finished run there yet
                done = False
            if not done:
                train(TrainOptions(scheme=scheme, corpus=[DEMO_CORPUS], out=out, size="tiny", steps=args.steps,
                                   seq_len=args.seq_len, seed=seed), resume=(out / "run.json").is_file())
            r = hidden(str(out), corpus=DEMO_CORPUS, seq_len=args.seq_len, max_blocks=256)  # as `posviz hidden RUN`
            rows += [{"scheme": scheme, "seed": seed, **rec} for rec in r.records()]
            print(f"{scheme} seed {seed}: share by layer " + " ".join(f"{x['positional_share']:.4f}" for x in r.records()),
                  file=sys.stderr, flush=True)
    return rows


def _read(path: Path) -> list[dict]:
    with open(path, encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def _mean_sd(values: list[float]) -> str:
    m = sum(values) / len(values)
    sd = math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 0.0
    return f"{m:.4f} ± {sd:.4f}" if abs(m) < 1 else f"{m:.1f} ± {sd:.1f}"


def grouped(rows: list[dict]) -> dict[tuple[str, int], list[dict]]:
    by: dict[tuple[str, int], list[dict]] = {}
    for r in rows:
        scheme = "none" if r["scheme"].startswith("none") else r["scheme"]
        by.setdefault((scheme, int(r["layer"])), []).append(r)
    order = ["absolute", "tisa", "alibi", "t5", "none"]
    return dict(sorted(by.items(), key=lambda kv: (order.index(kv[0][0]), kv[0][1])))


def table(rows: list[dict]) -> str:
    """Mean ± sd over seeds per scheme and layer."""
    heads = ["positional share", "its null", "R² off-diag of P_l", "its null", "rank90", "probe MAE", "middle", "order accuracy"]
    lines = ["| scheme | layer | seeds | " + " | ".join(heads) + " |", "|" + " --- |" * (len(heads) + 3)]
    for (scheme, layer), rs in grouped(rows).items():
        cells = [_mean_sd([float(r[f]) for r in rs]) for f in FIELDS]
        lines.append(f"| {LABELS[scheme]} | {layer} | {len(rs)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def figure(rows: list[dict], path: Path, budget: str) -> None:
    """Positional share, Toeplitzness of P_l and probe error per layer, one line per scheme (mean ± sd over seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    panels = [("positional_share", "positional share (null dashed)", "positional_share_null"),
              ("toeplitzness_offdiag", "off-diagonal R² of P_l (null dashed)", "toeplitzness_null_offdiag"),
              ("probe_mae", "position probe MAE (positions; middle dashed)", "probe_mae_baseline")]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4), constrained_layout=True)
    by = grouped(rows)
    schemes = list(dict.fromkeys(s for s, _ in by))
    colours = plt.get_cmap("tab10")
    for ax, (field, title, null) in zip(axes, panels, strict=True):
        for i, s in enumerate(schemes):
            layers = sorted(layer for (t, layer) in by if t == s)
            vals = np.array([[float(r[field]) for r in by[(s, layer)]] for layer in layers])
            ax.errorbar(layers, vals.mean(axis=1), yerr=vals.std(axis=1, ddof=1) if vals.shape[1] > 1 else None,
                        marker="o", ms=4, capsize=3, color=colours(i), label=LABELS[s])
            nulls = [np.mean([float(r[null]) for r in by[(s, layer)]]) for layer in layers]
            ax.plot(layers, nulls, ls="--", lw=0.8, color=colours(i))
        ax.set_title(title, fontsize=10)
        if field == "positional_share":
            ax.set_yscale("log")  # learned tables sit two orders of magnitude above the null
        ax.set_xlabel("layer (0 = embedding output)")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"Where position lives in posviz's schemes: {budget}; mean ± sd over seeds")
    tmp = path.with_name(path.stem + ".tmp" + path.suffix)
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    from posviz.util.atomic import write_text_atomic
    from posviz.util.tables import to_csv

    args = parse_args(argv)
    args.results.mkdir(parents=True, exist_ok=True)
    target = args.results / "hidden-schemes.csv"
    if args.phase == "all":
        write_text_atomic(target, to_csv(measure(args)))
        print(f"wrote {target}", file=sys.stderr)
    rows = _read(target) + (_read(args.none) if args.none.is_file() else [])
    write_text_atomic(args.results / "table.md", table(rows))
    figure(rows, args.results / "figure.png",
           f"tiny masked LMs, {args.steps} steps, posviz hidden on 256 blocks of {args.seq_len} tokens")
    print(f"wrote {args.results / 'table.md'}, {args.results / 'figure.png'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
