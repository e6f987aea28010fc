"""A miniature ALBERT v1 → v2: train "v1-like" and "v2-like" runs for several seeds, write every number.

ALBERT v2 differs from v1 by no dropout, more training data and longer training.
This script trains both recipes with ``posviz train``'s Python API, one size,
scheme ``absolute`` (ALBERT's learned E_P) by default:

* **v1-like**: dropout ``--v1-dropout`` (0.1), the share ``--v1-fraction`` (0.5) of
  the training blocks, ``--v1-steps`` steps (half of ``--steps``);
* **v2-like**: dropout 0, all training blocks, ``--steps`` steps (2000).

Everything else is shared: size, sequence length, batch, learning rate, the
tokenizer and the held-out set (both come from the whole corpus whatever the
fraction), the evaluations every ``--eval-every`` steps. Each of ``--seeds`` (0 1 2)
gives one run of each recipe, in ``OUT/v1-sSEED`` and ``OUT/v2-sSEED``.

Usage (from the repository root)::

    .venv/bin/python scripts/albert_v1_v2.py --out runs/albert-v1-v2 --results reports/albert-v1-v2
    # a check of the whole pipeline in about a minute:
    .venv/bin/python scripts/albert_v1_v2.py --out /tmp/v1v2 --steps 20 --eval-every 5 --seq-len 32 --batch-size 8 --vocab-size 600

Rerunning the same command skips finished runs and resumes interrupted ones from
their newest complete checkpoint; ``OUT/experiment.json`` records the settings,
and a rerun with other settings into the same ``--out`` is refused.

Output, in ``--results`` (default: ``--out``), all numbers of every run:

* ``albert_v1_v2_evaluations.csv``: one row per run and evaluation: ``variant``,
  ``seed``, the recipe (``dropout``, ``train_fraction``, ``steps``), ``step``, held-out
  ``eval_accuracy`` and ``eval_loss``, ``train_loss`` and every Toeplitzness field of the
  run's ``trajectory.json`` (per-head values as ``toeplitzness_head_H``);
* ``albert_v1_v2_final.csv``: the last evaluation of each run;
* ``albert_v1_v2_summary.csv``: per variant, mean and standard deviation over seeds
  (``FIELD_mean``, ``FIELD_sd``, ``n``) of each final number;
* ``albert_v1_v2_trajectories.csv``: the same per variant and evaluation step;
* ``albert_v1_v2.json``: the settings and all four tables;
* ``albert_v1_v2.png``: the figure (:mod:`posviz.plots.v1v2`): held-out accuracy
  against the headline Toeplitzness (off-diagonal R²) at the end of training, seeds
  as error bars and one v1 → v2 arrow, beside both against the step (mean ± sd).

Times: the defaults (size tiny, sequence length 128, batch 16; 3 seeds × (1000 +
2000) steps) take about an hour on 2 CPU cores at about 0.4 s per step, plus the
evaluations. On GPUs, add ``--precision bf16`` and a bigger ``--size`` and corpus;
the script runs under ``torchrun --nproc_per_node N scripts/albert_v1_v2.py ...``
(``--batch-size`` is then per process; the main process writes the results).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from posviz.train.corpus import DEMO_CORPUS

SETTINGS_FILE = "experiment.json"
PREFIX = "albert_v1_v2"
#: Columns that describe a run rather than measure it (not averaged over seeds).
_DESCRIPTIVE = ("variant", "seed", "run", "dropout", "train_fraction", "steps", "train_blocks", "eval_blocks")


@dataclass(frozen=True)
class Variant:
    """One recipe: its name, dropout, share of the training blocks and steps."""

    name: str
    dropout: float
    train_fraction: float
    steps: int


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("runs/albert-v1-v2"), help="folder of the runs (default: %(default)s)")
    p.add_argument("--results", type=Path, default=None, help="folder of the CSV and JSON results (default: --out)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds (default: 0 1 2)")
    p.add_argument("--size", default="tiny", choices=("tiny", "small", "base"), help="model size (default: tiny)")
    p.add_argument("--scheme", default="absolute", help="positional scheme (default: absolute, as ALBERT)")
    p.add_argument("--corpus", nargs="+", default=[DEMO_CORPUS], help=f"corpus specs, as posviz train's (default: {DEMO_CORPUS})")
    p.add_argument("--steps", type=int, default=2000, help="steps of the v2-like runs (default: 2000)")
    p.add_argument("--v1-steps", type=int, default=None, help="steps of the v1-like runs (default: half of --steps)")
    p.add_argument("--v1-dropout", type=float, default=0.1, help="dropout of the v1-like runs (default: 0.1; v2-like: 0)")
    p.add_argument("--v1-fraction", type=float, default=0.5, help="share of the training blocks the v1-like runs see (default: 0.5)")
    p.add_argument("--eval-every", type=int, default=None, help="evaluate every N steps; must divide both step counts (default: --steps / 20)")
    p.add_argument("--seq-len", type=int, default=128, help="block length (default: 128)")
    p.add_argument("--batch-size", type=int, default=16, help="blocks per step and process (default: 16)")
    p.add_argument("--lr", type=float, default=None, help="peak learning rate (default: posviz train's for the size)")
    p.add_argument("--vocab-size", type=int, default=8000, help="vocabulary of the trained tokenizer (default: 8000)")
    p.add_argument("--precision", default="auto", choices=("auto", "fp32", "bf16", "fp16"), help="as posviz train's (default: auto)")
    args = p.parse_args(argv)
    if args.v1_steps is None:
        args.v1_steps = max(1, args.steps // 2)
    if args.eval_every is None:
        args.eval_every = max(1, args.steps // 20)
    return args


def variants(args: argparse.Namespace) -> list[Variant]:
    """The two recipes."""
    return [Variant("v1", args.v1_dropout, args.v1_fraction, args.v1_steps), Variant("v2", 0.0, 1.0, args.steps)]


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """What defines the experiment (recorded in ``OUT/experiment.json``), the corpus by its content too."""
    keep = ("seeds", "size", "scheme", "corpus", "eval_every", "seq_len", "batch_size", "lr", "vocab_size", "precision")
    return {**{k: getattr(args, k) for k in keep}, **corpus_of(args.corpus), "variants": [asdict(v) for v in variants(args)]}


def corpus_of(specs: list[str]) -> dict[str, Any]:
    """The corpus's SHA-256, document count and size (:func:`posviz.train.corpus.corpus_identity`)."""
    from posviz.train.corpus import corpus_identity, load_corpus

    return corpus_identity(load_corpus(specs))


def check_settings(out: Path, wanted: dict[str, Any], *, started: bool = True) -> None:
    """Record the settings of a new experiment; refuse to continue one with other settings.

    ``started``: some run of the recorded experiment has begun. When none has (a first
    attempt stopped at bad input, say), other settings replace the record.

    Raises
    ------
    PosvizError
        ``--eval-every`` does not divide a step count, or ``out`` holds a started experiment with other settings.
    """
    from posviz.errors import PosvizError
    from posviz.train.corpus import check_same_corpus
    from posviz.util.atomic import write_text_atomic

    for v in wanted["variants"]:
        if v["steps"] % wanted["eval_every"]:
            raise PosvizError(f"--eval-every {wanted['eval_every']} does not divide the {v['name']}-like runs' {v['steps']} steps",
                              "the last evaluation must be the last step")
    path = out / SETTINGS_FILE
    if path.is_file():
        recorded = json.loads(path.read_text(encoding="utf-8"))
        if started:
            check_same_corpus(recorded, wanted, f"the experiment in {out}")
        changed = sorted(k for k in set(recorded) | set(wanted) if recorded.get(k) != wanted.get(k))
        if not changed:
            return
        if started:
            raise PosvizError(f"{out} holds an experiment with other settings ({', '.join(changed)} differ)",
                              f"rerun with the settings of {path}, or choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(wanted, indent=2) + "\n")


def run_folder(out: Path, variant: Variant, seed: int) -> Path:
    return out / f"{variant.name}-s{seed}"


def finished(run: Path, steps: int) -> bool:
    """The run's log reaches its last step, and its checkpoint of that step is complete."""
    from posviz.errors import PosvizError
    from posviz.read.manifests import checkpoint_problem
    from posviz.train.log import load_run_log

    try:
        evaluations = load_run_log(run)["evaluations"]
    except PosvizError:
        return False
    return bool(evaluations) and evaluations[-1]["step"] >= steps and checkpoint_problem(run / f"checkpoint-{steps}") is None


def train_one(args: argparse.Namespace, variant: Variant, seed: int) -> Path:
    """Train (or resume, or skip when finished) one run; its folder."""
    from posviz.train import TrainOptions, train
    from posviz.train.processes import process_rank

    run = run_folder(args.out, variant, seed)
    say = (lambda text: print(text, file=sys.stderr, flush=True)) if process_rank() == 0 else (lambda text: None)
    if finished(run, variant.steps):
        say(f"{run.name}: finished, skipped")
        return run
    resume = (run / "run.json").is_file()
    options = TrainOptions(
        scheme=args.scheme, corpus=list(args.corpus), out=run, size=args.size, steps=variant.steps, seq_len=args.seq_len,
        seed=seed, batch_size=args.batch_size, learning_rate=args.lr, eval_every=args.eval_every, vocab_size=args.vocab_size,
        precision=args.precision, dropout=variant.dropout, train_fraction=variant.train_fraction,
    )
    say(f"{run.name}: {'resuming' if resume else 'training'} ({variant.steps} steps, dropout {variant.dropout:g}, "
        f"train fraction {variant.train_fraction:g})")
    result = train(options, resume=resume)
    say(f"{run.name}: {result.steps_run} steps in {result.seconds:.0f} s")
    return run


def evaluation_rows(run: Path, variant: Variant, seed: int) -> list[dict[str, Any]]:
    """One row per evaluation of a run: the recipe, then every field of its ``trajectory.json`` record."""
    from posviz.train.log import load_run_log

    doc = load_run_log(run)
    info = doc["run"]
    rows = []
    for record in doc["evaluations"]:
        row: dict[str, Any] = {"variant": variant.name, "seed": seed, "run": str(run), "dropout": info.get("dropout"),
                               "train_fraction": info.get("train_fraction"), "steps": info.get("steps"),
                               "train_blocks": info.get("train_blocks"), "eval_blocks": info.get("eval_blocks")}
        row.update({k: v for k, v in record.items() if k != "toeplitzness_heads"})
        row.update({f"toeplitzness_head_{h}": v for h, v in enumerate(record.get("toeplitzness_heads") or [])})
        rows.append(row)
    return rows


def aggregate(rows: list[dict[str, Any]], by: tuple[str, ...]) -> list[dict[str, Any]]:
    """Mean and standard deviation (ddof 1; ``None`` for one value) over seeds of every number, per group ``by``."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(tuple(row[k] for k in by), []).append(row)
    out = []
    for key, members in groups.items():
        agg: dict[str, Any] = {**dict(zip(by, key, strict=True)), "n": len(members)}
        fields = [k for k in members[0] if k not in _DESCRIPTIVE and k not in by]
        for field in fields:
            values = [m.get(field) for m in members]
            values = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]
            mean = sum(values) / len(values) if values else None
            sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else None
            agg[f"{field}_mean"], agg[f"{field}_sd"] = mean, sd
        out.append(agg)
    return out


def result_tables(evaluations: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Every evaluation, each run's last one, their mean and sd per variant, and per variant and step."""
    order = {"v1": 0, "v2": 1}
    evaluations = sorted(evaluations, key=lambda r: (order.get(r["variant"], 2), r["seed"], r["step"]))
    last = {}
    for row in evaluations:  # in step order within a run
        last[(row["variant"], row["seed"])] = row
    return {
        "evaluations": evaluations,
        "final": list(last.values()),
        "summary": aggregate(list(last.values()), ("variant",)),
        "trajectories": aggregate(evaluations, ("variant", "step")),
    }


def write_results(folder: Path, wanted: dict[str, Any], tables: dict[str, list[dict[str, Any]]]) -> list[Path]:
    """Write each table as CSV and everything as one JSON file; the paths written."""
    from posviz.util.atomic import write_text_atomic
    from posviz.util.tables import to_csv

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, rows in tables.items():
        paths.append(folder / f"{PREFIX}_{name}.csv")
        write_text_atomic(paths[-1], to_csv(rows))
    paths.append(folder / f"{PREFIX}.json")
    write_text_atomic(paths[-1], json.dumps({"settings": wanted, **tables}, indent=2, allow_nan=False) + "\n")
    paths.append(folder / f"{PREFIX}.png")
    write_figure(paths[-1], tables["evaluations"], wanted)
    return paths


def write_figure(path: Path, evaluations: list[dict[str, Any]], wanted: dict[str, Any]) -> None:
    """The v1 → v2 figure (:func:`posviz.plots.v1v2.plot_v1_v2`), headline Toeplitzness on its axes."""
    from posviz.plots.common import save_figure
    from posviz.plots.v1v2 import plot_v1_v2

    v1, v2 = wanted["variants"]
    title = (f"A miniature ALBERT v1 → v2: posviz train, scheme {wanted['scheme']}, size {wanted['size']}, seq {wanted['seq_len']}, "
             f"{len(wanted['seeds'])} seeds; v1-like: dropout {v1['dropout']:g}, {v1['train_fraction']:g} of the data, {v1['steps']} steps; "
             f"v2-like: dropout {v2['dropout']:g}, all data, {v2['steps']} steps")
    save_figure(plot_v1_v2(evaluations, title=title), path, dpi=130)


def summary_text(summary: list[dict[str, Any]]) -> str:
    """Final numbers per variant, mean ± sd over seeds, one line each."""
    fields = ("step", "eval_accuracy", "toeplitzness_ep_offdiag", "null_ep_offdiag", "excess_ep_offdiag", "toeplitzness_ep",
              "null_ep", "toeplitzness_heads_offdiag_mean")
    lines = []
    for row in summary:
        parts = [f"{row['variant']}-like (n={row['n']})"]
        for f in fields:
            mean, sd = row.get(f"{f}_mean"), row.get(f"{f}_sd")
            if mean is not None:
                parts.append(f"{f} {mean:.4g}" + (f" ± {sd:.2g}" if sd is not None else ""))
        lines.append("  ".join(parts))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from posviz.errors import PosvizError
    from posviz.train.processes import every_process, training_processes

    args = parse_args(argv)
    wanted = settings(args)
    try:
        with training_processes() as rank:  # under torchrun: every process leaves through it, on every path
            try:
                # alike in every process (the same file, the same settings)
                check_settings(args.out, wanted, started=any(args.out.glob("*/run.json")))
            except PosvizError as e:
                raise every_process(e) from None
            evaluations = []
            for seed in args.seeds:
                for variant in variants(args):
                    run = train_one(args, variant, seed)
                    evaluations += evaluation_rows(run, variant, seed)
    except PosvizError as e:  # the main process's (the others end in silence with the same code)
        print(f"error: {e}", file=sys.stderr)
        return 2
    if rank != 0:
        return 0
    tables = result_tables(evaluations)
    paths = write_results(args.results or args.out, wanted, tables)
    print(summary_text(tables["summary"]))
    print("results     " + ", ".join(str(p) for p in paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
