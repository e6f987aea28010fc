"""TISA's Table 3 in miniature: pre-train with and without TISA, fine-tune every run, tabulate medians over seeds.

The TISA paper (Wennberg & Henter 2021, Table 3) fine-tunes ALBERT base v2 on
GLUE (a) with position embeddings and (b) without, each with TISA at S = 1, 3
and 5 kernels against the baseline, and reports medians over runs. This script
does the same at a size that fits a 2-core CPU, with ``posviz train`` and
``posviz finetune``'s Python APIs:

* arm (a): ``absolute`` (baseline) against ``absolute+tisa`` at S = 1, 3, 5;
* arm (b): ``none`` (baseline) against ``tisa`` (no E_P) at S = 1, 3, 5;
* TUPE-A beside them (TUPE's claim: better downstream, and sooner).

Every configuration is pre-trained for ``--seeds`` (0 1 2) with one budget
(steps, batch, sequence length, learning rate), keeping every checkpoint.
Phase ``finetune`` fine-tunes each run's last checkpoint on ``--tasks`` (the
built-in offline tasks by default: a word-order probe and a content-only task)
with ``--finetune-seeds``, and the absolute and TUPE-A runs' checkpoints along
pre-training (TUPE's "faster pre-training" curve).

Usage (from the repository root)::

    # pre-training, as two background processes that share the runs (one core each)
    OMP_NUM_THREADS=1 .venv/bin/python scripts/tisa_table3.py --phase pretrain --shard 0/2 &
    OMP_NUM_THREADS=1 .venv/bin/python scripts/tisa_table3.py --phase pretrain --shard 1/2 &
    # then fine-tuning and the results (reports/tisa-table3/)
    .venv/bin/python scripts/tisa_table3.py --phase all

Rerunning a command skips finished work and resumes interrupted runs; the settings
are recorded in ``OUT/experiment.json`` and a rerun with other settings is refused.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from albert_v1_v2 import check_settings, finished  # noqa: E402  (scripts share their run bookkeeping)


@dataclass(frozen=True)
class Config:
    """One pre-training configuration: the paper's arm, its name in the table, scheme and TISA kernels."""

    arm: str
    name: str
    scheme: str
    kernels: int = 5

    @property
    def label(self) -> str:
        return f"{self.arm}-{self.name}"


CONFIGS = (
    Config("a", "baseline", "absolute"),
    Config("a", "S1", "absolute+tisa", 1),
    Config("a", "S3", "absolute+tisa", 3),
    Config("a", "S5", "absolute+tisa", 5),
    Config("b", "baseline", "none"),
    Config("b", "S1", "tisa", 1),
    Config("b", "S3", "tisa", 3),
    Config("b", "S5", "tisa", 5),
    Config("tupe", "A", "tupe-a"),
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--phase", default="all", choices=("pretrain", "finetune", "all"), help="what to run (default: all)")
    p.add_argument("--shard", default="0/1", help="K/N: run every N-th pre-training run from the K-th (default: 0/1)")
    p.add_argument("--out", type=Path, default=Path("runs/tisa-table3"), help="folder of the runs (default: %(default)s)")
    p.add_argument("--results", type=Path, default=Path("reports/tisa-table3"), help="folder of the results (default: %(default)s)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="pre-training seeds (default: 0 1 2)")
    p.add_argument("--configs", nargs="+", default=None, help="only these configurations (labels such as a-S1; default: all)")
    p.add_argument("--size", default="tiny", choices=("tiny", "small", "base"), help="model size (default: tiny)")
    p.add_argument("--corpus", nargs="+", default=["stdlib-docstrings"], help="pre-training corpus (default: stdlib-docstrings)")
    p.add_argument("--steps", type=int, default=1000, help="pre-training steps of every run (default: 1000)")
    p.add_argument("--eval-every", type=int, default=100, help="evaluate and checkpoint every N steps (default: 100)")
    p.add_argument("--seq-len", type=int, default=64, help="block length (default: 64)")
    p.add_argument("--batch-size", type=int, default=32, help="blocks per step (default: 32)")
    p.add_argument("--lr", type=float, default=None, help="peak learning rate (default: posviz train's for the size)")
    p.add_argument("--vocab-size", type=int, default=4000, help="vocabulary of the trained tokenizer (default: 4000)")
    p.add_argument("--precision", default="auto", choices=("auto", "fp32", "bf16", "fp16"), help="as posviz train's")
    p.add_argument("--tasks", nargs="+", default=["builtin/bshift", "builtin/replaced"], help="fine-tuning tasks")
    p.add_argument("--finetune-seeds", type=int, nargs="+", default=[0, 1, 2], help="fine-tuning seeds (default: 0 1 2)")
    p.add_argument("--finetune-steps", type=int, default=300, help="fine-tuning steps (default: 300)")
    p.add_argument("--curve-configs", nargs="+", default=["a-baseline", "tupe-A"], help="runs fine-tuned along pre-training")
    p.add_argument("--curve-steps", type=int, nargs="+", default=[200, 400, 600, 800, 1000], help="checkpoints of the curve")
    args = p.parse_args(argv)
    k, n = (int(x) for x in args.shard.split("/"))
    if not 0 <= k < n:
        p.error(f"--shard {args.shard}: K must be in 0..N-1")
    args.shard_k, args.shard_n = k, n
    return args


def configs(args: argparse.Namespace) -> list[Config]:
    """The configurations to run (all, or those named by ``--configs``)."""
    chosen = [c for c in CONFIGS if args.configs is None or c.label in args.configs]
    if not chosen:
        raise SystemExit(f"error: no configuration among {args.configs}; known: {', '.join(c.label for c in CONFIGS)}")
    return chosen


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """What defines the pre-training (recorded in ``OUT/experiment.json``)."""
    keep = ("seeds", "size", "corpus", "steps", "eval_every", "seq_len", "batch_size", "lr", "vocab_size", "precision")
    return {**{k: getattr(args, k) for k in keep}, "configs": [c.label for c in CONFIGS],
            "variants": [{"name": "all", "steps": args.steps}]}


def run_folder(out: Path, config: Config, seed: int) -> Path:
    return out / f"{config.label}-s{seed}"


def pretrain_one(args: argparse.Namespace, config: Config, seed: int) -> Path:
    """Pre-train (or resume, or skip when finished) one run; its folder."""
    from posviz.train import TrainOptions, train

    run = run_folder(args.out, config, seed)
    if finished(run, args.steps):
        print(f"{run.name}: finished, skipped", file=sys.stderr, flush=True)
        return run
    resume = (run / "run.json").is_file()
    options = TrainOptions(
        scheme=config.scheme, corpus=list(args.corpus), out=run, size=args.size, steps=args.steps, seq_len=args.seq_len,
        seed=seed, batch_size=args.batch_size, learning_rate=args.lr, eval_every=args.eval_every,
        vocab_size=args.vocab_size, precision=args.precision, tisa_kernels=config.kernels,
        keep=args.steps // args.eval_every + 1,  # every checkpoint: the fine-tuning curve along pre-training needs them
    )
    print(f"{run.name}: {'resuming' if resume else 'training'} ({config.scheme}, S={config.kernels})", file=sys.stderr, flush=True)
    result = train(options, resume=resume)
    print(f"{run.name}: {result.steps_run} steps in {result.seconds:.0f} s", file=sys.stderr, flush=True)
    return run


def pretrain(args: argparse.Namespace) -> list[tuple[Config, int, Path]]:
    """Pre-train this shard's runs; every run of the experiment, with its folder."""
    check_settings(args.out, settings(args))
    everything = [(c, s) for s in args.seeds for c in configs(args)]
    for i, (config, seed) in enumerate(everything):
        if i % args.shard_n == args.shard_k:
            pretrain_one(args, config, seed)
    return [(c, s, run_folder(args.out, c, s)) for c, s in everything]


def main(argv: list[str] | None = None) -> int:
    from posviz.errors import PosvizError

    args = parse_args(argv)
    try:
        runs = pretrain(args) if args.phase in ("pretrain", "all") else None
        if args.phase in ("finetune", "all"):
            from tisa_table3_results import finetune_and_tabulate

            finetune_and_tabulate(args, runs or [(c, s, run_folder(args.out, c, s)) for s in args.seeds for c in configs(args)])
    except PosvizError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
