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
(steps, batch, sequence length, learning rate). Each run is then fine-tuned at
its last checkpoint on ``--tasks`` (a word-order probe and a content-only task)
with ``--finetune-seeds``; the ``--curve-configs`` runs (absolute and TUPE-A) are
also fine-tuned at ``--curve-steps`` along pre-training on the first task (TUPE's
"faster pre-training" curve).

A run is one unit of work: pre-train, fine-tune, then copy what the results
need (``run.json``, the ``trajectory`` log and the ``finetune/`` results, a few
kB) into ``RESULTS/runs/NAME``, and delete the run's checkpoints (``--keep-runs``
keeps them). A run whose results are in ``RESULTS/runs`` is skipped, so the
experiment resumes from the results alone, on another machine, after the run
folders are gone; an interrupted run resumes from its folder in ``--out``.
Tables and figures are rewritten from ``RESULTS/runs`` after every run.

Usage (from the repository root)::

    # two background processes that share the runs (one core each)
    OMP_NUM_THREADS=1 .venv/bin/python scripts/tisa_table3.py --shard 0/2 &
    OMP_NUM_THREADS=1 .venv/bin/python scripts/tisa_table3.py --shard 1/2 &
    # the tables and figures from whatever has finished
    .venv/bin/python scripts/tisa_table3.py --phase tabulate

The settings are recorded in ``RESULTS/experiment.json``; a rerun with other
settings is refused.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from albert_v1_v2 import check_settings, corpus_of, finished  # noqa: E402  (scripts share their run bookkeeping)

from posviz.train.corpus import DEMO_CORPUS  # noqa: E402


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
    p.add_argument("--phase", default="all", choices=("all", "tabulate"), help="run the experiment, or only tabulate (default: all)")
    p.add_argument("--shard", default="0/1", help="K/N: run every N-th run from the K-th (default: 0/1)")
    p.add_argument("--out", type=Path, default=Path("runs/tisa-table3"), help="folder of the run folders (default: %(default)s)")
    p.add_argument("--results", type=Path, default=Path("reports/tisa-table3"), help="folder of the results (default: %(default)s)")
    p.add_argument("--keep-runs", action="store_true", help="keep each run's checkpoints once its results are copied")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="pre-training seeds (default: 0 1 2)")
    labels = [c.label for c in CONFIGS]
    p.add_argument("--configs", nargs="+", default=None, choices=labels, metavar="LABEL",
                   help=f"only these configurations ({', '.join(labels)}; default: all)")
    p.add_argument("--size", default="tiny", choices=("tiny", "small", "base"), help="model size (default: tiny)")
    p.add_argument("--corpus", nargs="+", default=[DEMO_CORPUS], help=f"pre-training corpus (default: {DEMO_CORPUS})")
    p.add_argument("--steps", type=int, default=2000, help="pre-training steps of every run (default: 2000)")
    p.add_argument("--eval-every", type=int, default=500, help="evaluate and checkpoint every N steps (default: 500)")
    p.add_argument("--seq-len", type=int, default=64, help="block length (default: 64)")
    p.add_argument("--batch-size", type=int, default=32, help="blocks per step (default: 32)")
    p.add_argument("--lr", type=float, default=None, help="peak learning rate (default: posviz train's for the size)")
    p.add_argument("--vocab-size", type=int, default=4000, help="vocabulary of the trained tokenizer (default: 4000)")
    p.add_argument("--precision", default="auto", choices=("auto", "fp32", "bf16", "fp16"), help="as posviz train's")
    p.add_argument("--tasks", nargs="+", default=["builtin/shuffled", "builtin/bshift", "builtin/replaced"],
                   help="fine-tuning tasks, the word-order probe first (default: %(default)s)")
    p.add_argument("--finetune-seeds", type=int, nargs="+", default=[0, 1, 2], help="fine-tuning seeds per run (default: 0 1 2)")
    p.add_argument("--finetune-steps", type=int, default=1000, help="fine-tuning steps (default: 1000)")
    p.add_argument("--finetune-lr", type=float, default=5e-4, help="fine-tuning peak learning rate (default: 5e-4)")
    p.add_argument("--train-size", type=int, default=30000, help="fine-tuning examples at most (default: 30000)")
    p.add_argument("--dev-size", type=int, default=2000, help="dev examples (default: 2000)")
    p.add_argument("--curve-configs", nargs="+", default=["a-baseline", "tupe-A"], choices=labels, metavar="LABEL",
                   help="runs fine-tuned along pre-training")
    p.add_argument("--curve-steps", type=int, nargs="+", default=[500, 1000, 1500], help="checkpoints of the curve (and the last)")
    args = p.parse_args(argv)
    k, n = (int(x) for x in args.shard.split("/"))
    if not 0 <= k < n:
        p.error(f"--shard {args.shard}: K must be in 0..N-1")
    args.shard_k, args.shard_n = k, n
    return args


def configs(args: argparse.Namespace) -> list[Config]:
    """The configurations to run (all, or those named by ``--configs``)."""
    return [c for c in CONFIGS if args.configs is None or c.label in args.configs]  # argparse checked the labels


#: What defines the experiment (recorded in ``RESULTS/experiment.json``; the run selection is not part of it).
SETTINGS = ("seeds", "size", "corpus", "steps", "eval_every", "seq_len", "batch_size", "lr", "vocab_size", "precision",
            "tasks", "finetune_seeds", "finetune_steps", "finetune_lr", "train_size", "dev_size", "curve_configs", "curve_steps")


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """The experiment's settings, in the form :func:`albert_v1_v2.check_settings` records."""
    return {**{k: getattr(args, k) for k in SETTINGS}, **corpus_of(args.corpus), "configs": [c.label for c in CONFIGS],
            "variants": [{"name": "all", "steps": args.steps}]}


def run_name(config: Config, seed: int) -> str:
    return f"{config.label}-s{seed}"


def finetune_steps(args: argparse.Namespace, config: Config) -> list[int]:
    """The pre-training steps at which ``config``'s runs are fine-tuned (the last one on every task)."""
    curve = config.label in args.curve_configs
    return sorted({*args.curve_steps, args.steps}) if curve else [args.steps]


def has_results(args: argparse.Namespace, config: Config, seed: int) -> bool:
    """``RESULTS/runs/NAME`` holds every fine-tuning result the run owes."""
    from posviz.finetuning.results import load_results

    done = {(r["step"], r["task"], r["seed"]) for r in load_results(args.results / "runs" / run_name(config, seed))}
    owed = {(args.steps, t, s) for t in args.tasks for s in args.finetune_seeds}
    owed |= {(step, args.tasks[0], s) for step in finetune_steps(args, config) if step != args.steps for s in args.finetune_seeds}
    return owed <= done


def pretrain_one(args: argparse.Namespace, config: Config, seed: int) -> Path:
    """Pre-train (or resume, or skip when finished) one run; its folder."""
    from posviz.train import TrainOptions, train

    run = args.out / run_name(config, seed)
    if finished(run, args.steps):
        return run
    resume = (run / "run.json").is_file()
    options = TrainOptions(
        scheme=config.scheme, corpus=list(args.corpus), out=run, size=args.size, steps=args.steps, seq_len=args.seq_len,
        seed=seed, batch_size=args.batch_size, learning_rate=args.lr, eval_every=args.eval_every,
        vocab_size=args.vocab_size, precision=args.precision, tisa_kernels=config.kernels,
        keep=args.steps // args.eval_every + 1,  # every checkpoint: the fine-tuning curve along pre-training needs them
    )
    kernels = f", S={config.kernels}" if "tisa" in config.scheme else ""  # the other schemes ignore tisa_kernels
    _say(f"{run.name}: {'resuming' if resume else 'pre-training'} ({config.scheme}{kernels})")
    result = train(options, resume=resume)
    _say(f"{run.name}: {result.steps_run} steps in {result.seconds:.0f} s")
    return run


def finetune_one(args: argparse.Namespace, config: Config, run: Path) -> None:
    """Fine-tune the run's last checkpoint on every task, and the curve checkpoints on the first task."""
    import posviz

    common = dict(steps=args.finetune_steps, lr=args.finetune_lr, train_size=args.train_size, dev_size=args.dev_size)
    _say(f"{run.name}: fine-tuning step {args.steps} on {', '.join(args.tasks)}, seeds {args.finetune_seeds}")
    posviz.finetune([str(run)], tasks=args.tasks, seeds=args.finetune_seeds, checkpoints=[args.steps], resume=True, **common)
    along = [s for s in finetune_steps(args, config) if s != args.steps]
    if along:
        _say(f"{run.name}: fine-tuning along pre-training, steps {along}, {args.tasks[0]}, seeds {args.finetune_seeds}")
        posviz.finetune([str(run)], tasks=args.tasks[:1], seeds=args.finetune_seeds, checkpoints=along, resume=True, **common)


def keep_results(args: argparse.Namespace, run: Path) -> Path:
    """Copy what the results need (run.json, the trajectory log, finetune/) into ``RESULTS/runs``; the copy."""
    import shutil

    dest = args.results / "runs" / run.name
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name in ("run.json", "trajectory.csv", "trajectory.json"):
        shutil.copy2(run / name, tmp / name)
    shutil.copytree(run / "finetune", tmp / "finetune", ignore=shutil.ignore_patterns("work", "*.tmp"))
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)  # whole or absent: has_results never sees a half-copied run
    if not args.keep_runs:
        shutil.rmtree(run)
    return dest


def run_experiment(args: argparse.Namespace) -> None:
    """Pre-train, fine-tune and keep the results of this shard's runs that have none yet, tabulating after each."""
    started = any(args.out.glob("*/run.json")) or any((args.results / "runs").glob("*/run.json"))
    check_settings(args.results, settings(args), started=started)
    everything = [(c, s) for s in args.seeds for c in configs(args)]  # seed-major: every configuration's seed 0 first
    for i, (config, seed) in enumerate(everything):
        if i % args.shard_n != args.shard_k:
            continue
        if has_results(args, config, seed):
            _say(f"{run_name(config, seed)}: results kept, skipped")
            continue
        run = pretrain_one(args, config, seed)
        finetune_one(args, config, run)
        _say(f"{run.name}: results in {keep_results(args, run)}")
        tabulate_results(args)


def tabulate_results(args: argparse.Namespace) -> list[Path]:
    """The tables and figures from every run in ``RESULTS/runs``."""
    from tisa_table3_tabulate import runs_by_config, tabulate

    return tabulate(runs_by_config(args.results / "runs"), args.results, curve=tuple(args.curve_configs))


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    from posviz.errors import PosvizError

    args = parse_args(argv)
    try:
        if args.phase == "all":
            run_experiment(args)
        for path in tabulate_results(args):
            _say(f"wrote {path}")
    except PosvizError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
