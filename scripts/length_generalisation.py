"""Length generalisation on algorithmic tasks, Kazemnejad et al.'s comparison (NeurIPS 2023) in miniature.

Every (task, scheme, seed) is one run: ``posviz train --task`` on the task's lengths up to its trained length, then
``posviz extrapolate --task`` at lengths up to about twice it (exact match under greedy decoding, token accuracy,
loss and the attention statistics per length). Kazemnejad et al. train decoder-only T5-base models (about 107M
parameters) for 40k steps; here every scheme gets one small budget (``--size``, ``--steps``, ``--batch-size``),
the same for all, and a task counts only where every scheme learns it **within** the trained lengths (exact match
at least ``--learnt`` there): length generalisation is not measured on a task that is not learnt.

* schemes: ``absolute`` (a learned table: its rows past the trained lengths are never trained), ``sinusoidal``,
  ``rope`` (every dimension rotates) and ``rope-25`` (a quarter of each head's dimensions, as Kazemnejad et al.'s
  rotary), ``t5``, ``alibi``, ``tisa`` (S = 3 kernels), ``tupe-a``, ``none`` (NoPE), and ``fire`` (FIRE, Li et al.
  2023, a scheme from outside posviz: ``pip install ./examples/posviz-fire``; left out with a note when absent);
* the data are the tasks' own (:mod:`posviz.tasks`): every run of a task trains on the same examples and is tested on
  the same ones, each recorded by SHA-256; results made from other data are refused.

The budget is recorded in ``RESULTS/experiment.json``; a rerun with another is refused. A run writes
``RESULTS/runs/TASK-SCHEME-sSEED.json`` (its settings, its last held-out evaluation, the extrapolate
records) and its checkpoints are deleted (``--keep-runs`` keeps them); a run with results is skipped, an interrupted
one resumes from its folder. The tables and figures are rewritten from ``RESULTS/runs`` after every run, and by
``--phase tabulate`` alone.

Usage (from the repository root)::

    OMP_NUM_THREADS=1 .venv/bin/python scripts/length_generalisation.py --tasks copy --shard 0/2 &
    OMP_NUM_THREADS=1 .venv/bin/python scripts/length_generalisation.py --tasks copy --shard 1/2 &
    .venv/bin/python scripts/length_generalisation.py --phase tabulate
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

#: The schemes, in the order of the tables, and what ``posviz train`` is given for each.
SCHEMES: dict[str, dict[str, Any]] = {
    "absolute": {"scheme": "absolute"}, "sinusoidal": {"scheme": "sinusoidal"}, "rope": {"scheme": "rope"},
    "rope-25": {"scheme": "rope", "rotary_fraction": 0.25}, "t5": {"scheme": "t5"}, "alibi": {"scheme": "alibi"},
    "tisa": {"scheme": "tisa", "tisa_kernels": 3}, "tupe-a": {"scheme": "tupe-a"}, "none": {"scheme": "none"},
    "fire": {"scheme": "fire"},
}
LABELS = {"absolute": "absolute (learned table)", "sinusoidal": "sinusoidal", "rope": "RoPE", "rope-25": "RoPE 25 %",
          "t5": "T5 bias", "alibi": "ALiBi", "tisa": "TISA (S = 3)", "tupe-a": "TUPE-A", "none": "none (NoPE)", "fire": "FIRE"}
#: Kazemnejad et al.'s mean reciprocal rank over 17 splits x 3 seeds (their Figure 1/Table; REFERENCE notes).
PAPER_MRR = {"none": 0.687, "t5": 0.549, "alibi": 0.502, "rope-25": 0.330, "absolute": 0.215}
TASKS = ("copy", "reverse", "sorting", "parity", "addition", "scan")


def default_lengths(task: str) -> list[int]:
    """Eight evaluation lengths from a quarter of the trained length to its test length (SCAN: lengths it reaches)."""
    from posviz.tasks import get_task

    spec = get_task(task)
    if task == "scan":
        return [8, 16, 22, 24, 32, 40, 48]
    step = spec.train_length // 4
    return list(range(step, spec.test_length + 1, step))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--phase", default="all", choices=("all", "tabulate"), help="run the experiment, or only tabulate (default: all)")
    p.add_argument("--shard", default="0/1", help="K/N: run every N-th run from the K-th (default: 0/1)")
    p.add_argument("--out", type=Path, default=Path("runs/length-generalisation"), help="run folders")
    p.add_argument("--results", type=Path, default=Path("reports/length-generalisation"), help="folder of the results")
    p.add_argument("--keep-runs", action="store_true", help="keep each run's checkpoints once its results are written")
    p.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS, help="tasks (default: all)")
    p.add_argument("--schemes", nargs="+", default=list(SCHEMES), choices=list(SCHEMES), help="schemes (default: all)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="training seeds (default: 0 1 2)")
    p.add_argument("--size", default="tiny", choices=("tiny", "small", "base"), help="model size (default: tiny)")
    p.add_argument("--steps", type=int, default=3000, help="training steps of every run (default: 3000)")
    p.add_argument("--eval-every", type=int, default=500, help="held-out evaluation and checkpoint interval (default: 500)")
    p.add_argument("--batch-size", type=int, default=64, help="examples per step (default: 64)")
    p.add_argument("--examples", type=int, default=100, help="test examples per length (default: 100)")
    p.add_argument("--learnt", type=float, default=0.95, help="exact match within the trained lengths that counts as learnt (default: 0.95)")
    args = p.parse_args(argv)
    args.shard_k, args.shard_n = (int(x) for x in args.shard.split("/"))
    return args


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """What every run shares (``RESULTS/experiment.json``; a rerun with others is refused): tasks, schemes and seeds
    may grow, the budget may not."""
    return {"size": args.size, "steps": args.steps, "eval_every": args.eval_every, "batch_size": args.batch_size,
            "examples": args.examples, "learnt": args.learnt, "variants": [{"name": "all", "steps": args.steps}]}


def run_name(task: str, scheme: str, seed: int) -> str:
    return f"{task}-{scheme}-s{seed}"


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def available(scheme: str) -> bool:
    """Whether the scheme can be trained here (FIRE needs its package installed)."""
    from posviz.models.schemes.plugins import known_schemes

    return SCHEMES[scheme]["scheme"] in known_schemes()


def train_one(args: argparse.Namespace, task: str, scheme: str, seed: int) -> Path:
    """Train (or resume, or skip when finished) one task run; its folder."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from albert_v1_v2 import finished

    from posviz.train import TrainOptions, train

    run = args.out / run_name(task, scheme, seed)
    if finished(run, args.steps):
        return run
    resume = (run / "run.json").is_file()
    options = TrainOptions(**SCHEMES[scheme], corpus=[], out=run, task=task, size=args.size, steps=args.steps, seed=seed,
                           batch_size=args.batch_size, eval_every=args.eval_every, precision="fp32")
    _say(f"{run.name}: {'resuming' if resume else 'training'}")
    result = train(options, resume=resume)
    _say(f"{run.name}: {result.steps_run} steps in {result.seconds:.0f} s")
    return run


def evaluate_one(args: argparse.Namespace, task: str, run: Path) -> dict[str, Any]:
    """``posviz.extrapolate --task`` of the run's last checkpoint at every length, with its last held-out evaluation."""
    import posviz
    from posviz.train.log import load_run_log

    result = posviz.extrapolate(str(run), task=task, lengths=default_lengths(task), examples=args.examples, batch_size=32)
    last = load_run_log(run)["evaluations"][-1]
    return {"run": run.name, "settings": json.loads((run / "run.json").read_text(encoding="utf-8")),
            "final_step": last["step"], "eval_exact_match": last.get("eval_exact_match"), "eval_loss": last.get("eval_loss"),
            "test_data": result.data, "extrapolate": result.records()}


def run_experiment(args: argparse.Namespace) -> None:
    """Train, evaluate and keep the results of this shard's runs that have none yet, tabulating after each."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from albert_v1_v2 import check_settings

    from posviz.util.atomic import write_text_atomic

    started = any(args.out.glob("*/run.json")) or any((args.results / "runs").glob("*.json"))
    check_settings(args.results, settings(args), started=started)
    schemes = [s for s in args.schemes if available(s) or _say(f"{s}: not installed here, left out") is not None]
    everything = [(task, scheme, seed) for task in args.tasks for seed in args.seeds for scheme in schemes]
    for i, (task, scheme, seed) in enumerate(everything):
        if i % args.shard_n != args.shard_k:
            continue
        target = args.results / "runs" / f"{run_name(task, scheme, seed)}.json"
        if target.is_file():
            continue
        run = train_one(args, task, scheme, seed)
        record = evaluate_one(args, task, run)
        target.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(target, json.dumps(record, indent=1) + "\n")
        if not args.keep_runs:
            shutil.rmtree(run)
        _say(f"{run.name}: results in {target}")
        tabulate(args)


# --- tables and figures ------------------------------------------------------------------------------------------


def load_runs(results: Path) -> list[dict[str, Any]]:
    """Every run's results, refusing runs of one task trained or tested on different examples, or with other budgets."""
    runs = [json.loads(p.read_text(encoding="utf-8")) for p in sorted((results / "runs").glob("*.json"))]
    seen: dict[str, tuple] = {}
    for r in runs:
        s = r["settings"]
        key = (s["task_data"]["train"]["sha256"], r["test_data"]["sha256"], s["size"], s["steps"], s["batch_size"], s["train_length"])
        if seen.setdefault(s["task"], key) != key:
            raise SystemExit(f"error: the runs of task {s['task']} in {results / 'runs'} differ in data or budget ({r['run']})")
    return runs


def scheme_of(run: dict[str, Any]) -> str:
    return run["run"].split("-", 1)[1].rsplit("-s", 1)[0]


def summary(runs: list[dict[str, Any]], threshold: float = 0.95) -> tuple[list[dict[str, Any]], dict[str, bool]]:
    """Per task and scheme: exact match within and beyond the trained lengths (mean over seeds), and which tasks are learnt."""
    import numpy as np

    rows, learnt = [], {}
    by: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in runs:
        by.setdefault((r["settings"]["task"], scheme_of(r)), []).append(r)
    for (task, scheme), group in sorted(by.items(), key=lambda kv: (TASKS.index(kv[0][0]), list(SCHEMES).index(kv[0][1]))):
        within = [np.mean([x["accuracy"] for x in g["extrapolate"] if x["length"] <= x["train_length"]]) for g in group]
        beyond = [np.mean([x["accuracy"] or 0.0 for x in g["extrapolate"] if x["length"] > x["train_length"]]) for g in group]
        rows.append({"task": task, "scheme": scheme, "seeds": len(group), "within": float(np.mean(within)),
                     "within_min": float(np.min(within)), "beyond": float(np.mean(beyond)), "beyond_by_seed": [float(b) for b in beyond]})
    for row in rows:
        learnt[row["task"]] = learnt.get(row["task"], True) and row["within_min"] >= threshold
    return rows, learnt


def mean_reciprocal_rank(rows: list[dict[str, Any]], learnt: dict[str, bool]) -> dict[str, float]:
    """Kazemnejad et al.'s MRR: per learnt task and seed, rank the schemes by exact match beyond the trained lengths
    (ties share the better rank), and average 1 / rank over tasks and seeds."""
    ranks: dict[str, list[float]] = {}
    for task in [t for t, ok in learnt.items() if ok]:
        group = [r for r in rows if r["task"] == task]
        for seed in range(min(len(r["beyond_by_seed"]) for r in group)):
            scores = {r["scheme"]: r["beyond_by_seed"][seed] for r in group}
            for scheme, v in scores.items():
                ranks.setdefault(scheme, []).append(1.0 / (1 + sum(w > v for w in scores.values())))
    return {s: sum(v) / len(v) for s, v in ranks.items()}


def markdown(rows: list[dict[str, Any]], learnt: dict[str, bool], mrr: dict[str, float]) -> str:
    lines = ["| task | scheme | seeds | exact match within (mean, min over seeds) | exact match beyond | learnt |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['task']} | {LABELS[r['scheme']]} | {r['seeds']} | {r['within']:.3f} ({r['within_min']:.3f}) | "
                     f"{r['beyond']:.3f} | {'yes' if learnt[r['task']] else 'no'} |")
    lines += ["", "| scheme | MRR here (learnt tasks) | MRR, Kazemnejad et al. |", "|---|---|---|"]
    for s in sorted(mrr, key=lambda s: -mrr[s]):
        paper = PAPER_MRR.get(s)
        lines.append(f"| {LABELS[s]} | {mrr[s]:.3f} | {'—' if paper is None else f'{paper:.3f}'} |")
    return "\n".join(lines) + "\n"


def figure(runs: list[dict[str, Any]], path: Path) -> None:
    """Exact match against length, one panel per task, one line per scheme (mean over seeds); dotted: trained length."""
    import matplotlib

    from posviz.plots.common import new_figure, save_figure

    tasks = [t for t in TASKS if any(r["settings"]["task"] == t for r in runs)]
    fig = new_figure(4.2 * len(tasks), 3.6)
    axes = fig.subplots(1, len(tasks), squeeze=False)[0]
    colours = matplotlib.colormaps["tab10"]
    for ax, task in zip(axes, tasks, strict=True):
        trained = next(r["settings"]["train_length"] for r in runs if r["settings"]["task"] == task)
        for i, scheme in enumerate(SCHEMES):
            group = [r for r in runs if r["settings"]["task"] == task and scheme_of(r) == scheme]
            if not group:
                continue
            lengths = [x["length"] for x in group[0]["extrapolate"]]
            acc = [sum(g["extrapolate"][j]["accuracy"] or 0.0 for g in group) / len(group) for j in range(len(lengths))]
            ax.plot(lengths, acc, marker="o", ms=3, color=colours(i % 10), label=LABELS[scheme])
        ax.axvline(trained, color="0.4", ls=":", lw=1)
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(f"{task} (dotted: trained length)", fontsize=9)
        ax.set_xlabel("length (the task's own)", fontsize=8)
        ax.set_ylabel("exact match (greedy)", fontsize=8)
        ax.tick_params(labelsize=7)
    axes[-1].legend(fontsize=6.5, frameon=False)
    save_figure(fig, path, dpi=130)


def tabulate(args: argparse.Namespace) -> list[Path]:
    from posviz.util.atomic import write_text_atomic

    runs = load_runs(args.results)
    if not runs:
        return []
    rows, learnt = summary(runs, args.learnt)
    mrr = mean_reciprocal_rank(rows, learnt)
    out = [args.results / "table.md", args.results / "table.json", args.results / "figure.png"]
    write_text_atomic(out[0], markdown(rows, learnt, mrr))
    write_text_atomic(out[1], json.dumps({"rows": rows, "learnt": learnt, "mrr": mrr, "paper_mrr": PAPER_MRR}, indent=1) + "\n")
    figure(runs, out[2])
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.phase == "all":
        run_experiment(args)
    for path in tabulate(args):
        _say(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
