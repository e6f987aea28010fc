"""Train every positional scheme briefly on the offline demo corpus and plot its Toeplitzness trajectory.

Usage (from the repository root; CPU, a few minutes)::

    .venv/bin/python scripts/training_trajectories.py --steps 300 --out runs/demo -o reports/training-trajectories.png

Each scheme is trained with ``posviz train``'s Python API (tiny size, sequence
length 128, seed 0, the pinned ``cpython-3.11.7-docstrings`` corpus); existing finished runs in
``--out`` are reused. The figure shows, per evaluation: the Toeplitzness of
P = E_P E_Pᵀ (schemes with a table) against its row-permutation null, the mean
Toeplitzness of the layer-0 heads' positional scores, and held-out masked-token
accuracy. A summary table is printed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from posviz.train.corpus import DEMO_CORPUS

SCHEMES = ("absolute", "absolute+tisa", "tisa", "tupe-a", "tupe-r")
COLORS = {"absolute": "#1f77b4", "absolute+tisa": "#ff7f0e", "tisa": "#2ca02c", "tupe-a": "#d62728", "tupe-r": "#9467bd"}


def run_all(args) -> dict[str, Path]:
    from posviz.train import TrainOptions, train
    from posviz.train.log import load_run_log

    # every scheme's options first: a bad one stops the script before any training, not after the others
    options = {scheme: TrainOptions(scheme=scheme, corpus=[args.corpus], out=args.out / scheme.replace("+", "-"), size="tiny",
                                    steps=args.steps, seq_len=args.seq_len, seed=args.seed, eval_every=args.eval_every,
                                    batch_size=args.batch_size) for scheme in args.schemes}
    for scheme, opts in options.items():
        out = opts.out
        try:
            if load_run_log(out)["evaluations"][-1]["step"] == args.steps:
                print(f"{scheme}: reusing {out}", file=sys.stderr)
                continue
        except Exception:
            pass
        result = train(opts, resume=(out / "run.json").is_file())
        print(f"{scheme}: {result.steps_run} steps in {result.seconds:.0f} s", file=sys.stderr)
    return {scheme: opts.out for scheme, opts in options.items()}


def plot(runs: dict[str, Path], output: Path) -> None:
    from posviz.plots.common import new_figure, save_figure
    from posviz.train.log import load_run_log

    fig = new_figure(13, 4)
    ax_ep, ax_heads, ax_acc = fig.subplots(1, 3)
    for scheme, out in runs.items():
        ev = load_run_log(out)["evaluations"]
        steps = [r["step"] for r in ev]
        color = COLORS.get(scheme)
        if ev[0].get("toeplitzness_ep") is not None:  # the headline variant, off-diagonal R², with its null
            ax_ep.plot(steps, [r["toeplitzness_ep_offdiag"] for r in ev], marker="o", ms=3, color=color, label=scheme)
            ax_ep.plot(steps, [r["null_ep_offdiag"] for r in ev], ls=":", color=color, lw=1)
        ax_heads.plot(steps, [r["toeplitzness_heads_offdiag_mean"] for r in ev], marker="o", ms=3, color=color, label=scheme)
        ax_acc.plot(steps, [r["eval_accuracy"] for r in ev], marker="o", ms=3, color=color, label=scheme)
    ax_ep.set(title="Toeplitzness of P = E_P E_Pᵀ (dotted: row-permutation null)", xlabel="step", ylabel="off-diagonal R²")
    ax_heads.set(title="Layer-0 heads' positional scores (mean R²)", xlabel="step", ylabel="off-diagonal R²")
    ax_acc.set(title="Held-out masked-token accuracy", xlabel="step", ylabel="accuracy")
    for ax in (ax_ep, ax_heads, ax_acc):
        ax.grid(alpha=0.3)
        ax.title.set_fontsize(9)
    ax_heads.legend(fontsize=8)
    run = load_run_log(next(iter(runs.values())))["run"]
    corpus = ", ".join(run["corpus"]) + (f" (sha256 {run['corpus_sha256'][:12]})" if run.get("corpus_sha256") else "")
    fig.suptitle(f"posviz train: tiny ALBERT-style models on {corpus} (CPU, seed {run['seed']})", fontsize=10)
    save_figure(fig, output, dpi=110)


def summary(runs: dict[str, Path]) -> str:
    from posviz.train.log import load_run_log

    lines = ["| scheme | steps | eval loss | accuracy | T(E_P) off-diag. start → end | its null | T(E_P) full start → end "
             "| heads mean T off-diag. start → end |", "|---|---|---|---|---|---|---|---|"]

    def f(x):
        return "—" if x is None else f"{x:.3f}"

    for scheme, out in runs.items():
        ev = load_run_log(out)["evaluations"]
        a, b = ev[0], ev[-1]
        lines.append(
            f"| {scheme} | {b['step']} | {f(a['eval_loss'])} → {f(b['eval_loss'])} | {f(a['eval_accuracy'])} → {f(b['eval_accuracy'])} "
            f"| {f(a.get('toeplitzness_ep_offdiag'))} → {f(b.get('toeplitzness_ep_offdiag'))} | {f(b.get('null_ep_offdiag'))} "
            f"| {f(a.get('toeplitzness_ep'))} → {f(b.get('toeplitzness_ep'))} "
            f"| {f(a.get('toeplitzness_heads_offdiag_mean'))} → {f(b.get('toeplitzness_heads_offdiag_mean'))} |"
        )
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--schemes", nargs="+", default=list(SCHEMES))
    p.add_argument("--corpus", default=DEMO_CORPUS)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--eval-every", type=int, default=25)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's choice)")
    p.add_argument("--out", type=Path, default=Path("runs/demo"))
    p.add_argument("-o", "--output", type=Path, default=Path("reports/training-trajectories.png"))
    args = p.parse_args()
    from posviz.errors import PosvizError
    from posviz.util.paths import check_folder

    try:
        check_folder(args.out, "--out")  # bad input stops here, before minutes of training
        check_folder(args.output.parent, "--output's folder")
        if args.threads:
            import torch

            torch.set_num_threads(args.threads)
        runs = run_all(args)
        args.output.parent.mkdir(parents=True, exist_ok=True)
        plot(runs, args.output)
    except PosvizError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(summary(runs))
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
