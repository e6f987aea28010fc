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
``RESULTS/runs/TASK-SCHEME-sSEED.json`` (its settings, its held-out evaluations, the extrapolate records, the
offset profiles per layer, and the machine it ran on) and its checkpoints are deleted (``--keep-runs`` keeps them); a
run with results is skipped, an interrupted one resumes from its folder. The tables and figures are rewritten from
``RESULTS/runs`` after every run, and by ``--phase tabulate`` alone.

``--workers N`` runs N shards side by side (each its own process, one thread each), which is how a GPU is kept
busy with models this small; ``--stop-after SECONDS`` starts no run after that long (a time-boxed session). Runs go
task by task in the order of ``--tasks``, then seed by seed, so that a time box leaves whole tasks done
(``--order seed``: every task's first seed before any second one).

Usage (from the repository root)::

    # two CPU cores: 3 to 4 minutes a parity run, 5 to 14 a sorting run, about 10 a SCAN run
    OMP_NUM_THREADS=1 .venv/bin/python scripts/length_generalisation.py --device cpu --workers 2 --tasks sorting parity
    .venv/bin/python scripts/length_generalisation.py --workers 15 --device cuda     # a GPU: every task, 3 seeds
    .venv/bin/python scripts/length_generalisation.py --phase tabulate
    # a task at the budget a pilot found for it (each task's runs share one budget; the tables name it)
    .venv/bin/python scripts/length_generalisation.py --phase tabulate \
        --task-results parity=reports/length-generalisation/pilot/parity-6000-lr5e-4
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
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
#: Exact match of guessing: parity's answer is one bit, so half of the answers are right by chance.
CHANCE = {"parity": 0.5}


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
    p.add_argument("--compare", nargs=2, type=Path, metavar=("SHIPPED", "RERUN"),
                   help="compare two records of one run (exit 1 if exact match differs by more than --atol at a length)")
    p.add_argument("--atol", type=float, default=0.05, help="--compare: largest exact-match difference accepted (default: 0.05)")
    p.add_argument("--shard", default="0/1", help="K/N: run every N-th run from the K-th (default: 0/1)")
    p.add_argument("--workers", type=int, default=1, help="shards run side by side, one process each (default: 1)")
    p.add_argument("--order", default="task", choices=("task", "seed"),
                   help="task: each task's seeds before the next task; seed: every task's first seed first (default: task)")
    p.add_argument("--stop-after", type=float, default=None, help="start no run after this many seconds (default: none)")
    p.add_argument("--device", default=None, choices=("cpu", "cuda"), help="where runs train and are tested (default: cuda if there is one)")
    p.add_argument("--out", type=Path, default=Path("runs/length-generalisation"), help="run folders")
    p.add_argument("--results", type=Path, default=Path("reports/length-generalisation"), help="folder of the results")
    p.add_argument("--keep-runs", action="store_true", help="keep each run's checkpoints once its results are written")
    p.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS, help="tasks (default: all)")
    p.add_argument("--schemes", nargs="+", default=list(SCHEMES), choices=list(SCHEMES), help="schemes (default: all)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="training seeds (default: 0 1 2)")
    p.add_argument("--size", default="tiny", help="model size: tiny, small, base or a shape such as 2x64 (posviz train --size; default: tiny)")
    p.add_argument("--steps", type=int, default=3000, help="training steps of every run (default: 3000)")
    p.add_argument("--eval-every", type=int, default=500, help="held-out evaluation and checkpoint interval (default: 500)")
    p.add_argument("--batch-size", type=int, default=64, help="examples per step (default: 64)")
    p.add_argument("--learning-rate", type=float, default=None,
                   help="peak learning rate of every run (default: the size's own, 1e-3 for tiny; warm-up over a tenth of the steps)")
    p.add_argument("--examples", type=int, default=100, help="test examples per length (default: 100)")
    p.add_argument("--no-tables", action="store_true", help=argparse.SUPPRESS)  # a shard of --workers
    p.add_argument("--learnt", type=float, default=0.95, help="exact match within the trained lengths that counts as learnt (default: 0.95)")
    p.add_argument("--task-results", nargs="+", default=[], metavar="TASK=RESULTS",
                   help="tables: TASK's runs from RESULTS/runs (a pilot's budget at which every scheme learns it) in place of "
                        "those under --results")
    args = p.parse_args(argv)
    args.task_results = task_results(p, args.task_results)
    args.shard_k, args.shard_n = (int(x) for x in args.shard.split("/"))
    args.started = time.monotonic()
    return args


def task_results(parser: argparse.ArgumentParser, pairs: list[str]) -> dict[str, Path]:
    """``--task-results TASK=RESULTS ...`` as ``{task: folder}``; a bad pair is a usage error (exit 2)."""
    out: dict[str, Path] = {}
    for pair in pairs:
        task, sep, folder = pair.partition("=")
        if not sep or task not in TASKS or not folder:
            parser.error(f"--task-results {pair}: expected TASK=RESULTS with TASK one of {', '.join(TASKS)}")
        if task in out:
            parser.error(f"--task-results: {task} given twice")
        if not any((Path(folder) / "runs").glob(f"{task}-*.json")):
            parser.error(f"--task-results {pair}: {Path(folder) / 'runs'} holds no run of {task}")
        out[task] = Path(folder)
    return out


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """What every run shares (``RESULTS/experiment.json``; a rerun with others is refused): tasks, schemes and seeds
    may grow, the budget may not."""
    shared = {"size": args.size, "steps": args.steps, "eval_every": args.eval_every, "batch_size": args.batch_size,
              "examples": args.examples, "learnt": args.learnt, "variants": [{"name": "all", "steps": args.steps}]}
    if args.learning_rate is not None:  # only when given: the results made before the option keep their settings
        shared["learning_rate"] = args.learning_rate
    return shared


def run_name(task: str, scheme: str, seed: int) -> str:
    return f"{task}-{scheme}-s{seed}"


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def available(scheme: str) -> bool:
    """Whether the scheme can be trained here (FIRE needs its package installed)."""
    from posviz.schemes.modules.plugins import known_schemes

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
                           batch_size=args.batch_size, eval_every=args.eval_every, precision="fp32",
                           learning_rate=args.learning_rate)
    _say(f"{run.name}: {'resuming' if resume else 'training'}")
    result = train(options, resume=resume)
    _say(f"{run.name}: {result.steps_run} steps in {result.seconds:.0f} s")
    return run


def evaluate_one(args: argparse.Namespace, task: str, run: Path) -> dict[str, Any]:
    """``posviz.extrapolate --task`` of the run's last checkpoint at every length, with its last held-out evaluation."""
    import posviz
    from posviz.train.log import load_run_log

    result = posviz.extrapolate(str(run), task=task, lengths=default_lengths(task), examples=args.examples, batch_size=32,
                                device=device(args))
    log = load_run_log(run)["evaluations"]
    last = log[-1]
    # the run is named, not its folder: a record says nothing of the machine's folders (runs may live in scratch space)
    settings = {**json.loads((run / "run.json").read_text(encoding="utf-8")), "out": run.name}
    records = [{**r, "model": r["model"].replace(str(run), run.name)} for r in result.records()]
    return {"run": run.name, "settings": settings,
            "final_step": last["step"], "eval_exact_match": last.get("eval_exact_match"), "eval_loss": last.get("eval_loss"),
            "evaluations": [{k: e.get(k) for k in ("step", "eval_exact_match", "eval_loss")} for e in log],
            "test_data": result.data, "extrapolate": records, "profiles": profiles_by_distance(result),
            "machine": machine(args)}


def device(args: argparse.Namespace) -> str:
    """``--device``, or cuda where there is one."""
    import torch

    return args.device or ("cuda" if torch.cuda.is_available() else "cpu")


def machine(args: argparse.Namespace) -> dict[str, str]:
    """Where a run was made: its device and the releases that computed it (runs of one budget on other machines differ
    in rounding, so a table says which it holds)."""
    import platform

    import torch
    import transformers

    where = device(args)
    name = torch.cuda.get_device_name(0) if where == "cuda" else platform.processor() or platform.machine()
    return {"device": f"{where} ({name})", "torch": torch.__version__, "transformers": transformers.__version__}


def profiles_by_distance(result: Any) -> list[dict[str, Any]]:
    """Per length and layer, the offset profile looking back (distance 0, 1, ...), the mean over the layer's heads."""
    import numpy as np

    out = []
    for r in result.runs:
        for layer, profile in r.profiles.items():
            half = (profile.shape[-1] - 1) // 2
            back = np.nanmean(profile[:, half::-1], axis=0)  # offsets 0, -1, ..., -(n - 1): a causal query's keys
            out.append({"length": r.length, "layer": layer, "by_distance": [round(float(x), 6) for x in back]})
    return out


def run_workers(args: argparse.Namespace, argv: list[str]) -> None:
    """``--workers N``: this script once per shard, side by side, one thread each; tables once all have stopped."""
    settings_check(args)
    rest = [a for i, a in enumerate(argv) if a != "--workers" and (i == 0 or argv[i - 1] != "--workers")]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    procs = [subprocess.Popen([sys.executable, __file__, *rest, "--shard", f"{k}/{args.workers}", "--no-tables"], env=env)
             for k in range(args.workers)]
    failed = [k for k, proc in enumerate(procs) if proc.wait() != 0]
    if failed:
        raise SystemExit(f"error: shards {failed} of {args.workers} failed (their runs resume on the next call)")


def settings_check(args: argparse.Namespace) -> None:
    """Refuse a budget other than the one ``RESULTS/experiment.json`` records (before anything trains)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from albert_v1_v2 import check_settings

    started = any(args.out.glob("*/run.json")) or any((args.results / "runs").glob("*.json"))
    check_settings(args.results, settings(args), started=started)


def run_experiment(args: argparse.Namespace) -> None:
    """Train, evaluate and keep the results of this shard's runs that have none yet, tabulating after each."""
    from posviz.util.atomic import write_text_atomic

    settings_check(args)
    schemes = [s for s in args.schemes if available(s) or _say(f"{s}: not installed here, left out") is not None]
    everything = [(task, scheme, seed) for task in args.tasks for seed in args.seeds for scheme in schemes]
    if args.order == "seed":
        everything.sort(key=lambda run: args.seeds.index(run[2]))  # stable: tasks stay in order within a seed
    for i, (task, scheme, seed) in enumerate(everything):
        if i % args.shard_n != args.shard_k:
            continue
        target = args.results / "runs" / f"{run_name(task, scheme, seed)}.json"
        if target.is_file():
            continue
        if args.stop_after is not None and time.monotonic() - args.started > args.stop_after:
            _say(f"shard {args.shard}: --stop-after {args.stop_after:.0f} s reached, {run_name(task, scheme, seed)} not started")
            return
        run = train_one(args, task, scheme, seed)
        record = evaluate_one(args, task, run)
        target.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(target, json.dumps(record, indent=1) + "\n")
        if not args.keep_runs:
            shutil.rmtree(run)
        _say(f"{run.name}: results in {target}")
        if not args.no_tables:
            tabulate(args)


# --- tables and figures ------------------------------------------------------------------------------------------


def load_runs(results: Path) -> list[dict[str, Any]]:
    """Every run's results, refusing runs of one task trained or tested on different examples, or with other budgets."""
    runs = [json.loads(p.read_text(encoding="utf-8")) for p in sorted((results / "runs").glob("*.json"))]
    seen: dict[str, tuple] = {}
    for r in runs:
        s = r["settings"]
        key = (s["task_data"]["train"]["sha256"], r["test_data"]["sha256"], s["size"], s["steps"], s["batch_size"], s["train_length"],
               s.get("learning_rate"))
        if seen.setdefault(s["task"], key) != key:
            raise SystemExit(f"error: the runs of task {s['task']} in {results / 'runs'} differ in data or budget ({r['run']})")
    return runs


def gather_runs(results: Path, elsewhere: dict[str, Path]) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """The runs the tables are made of: those under ``results``, each task of ``elsewhere`` taken from its own folder
    instead (every folder checked as :func:`load_runs` does); and each task's budget: steps, peak learning rate (None:
    the size's own) and the folder, relative to ``results``."""
    runs = load_runs(results)
    for task, folder in elsewhere.items():
        runs = [r for r in runs if r["settings"]["task"] != task] + [r for r in load_runs(folder) if r["settings"]["task"] == task]
    budgets: dict[str, dict[str, Any]] = {}
    for r in runs:
        task = r["settings"]["task"]
        folder = Path(os.path.relpath(elsewhere[task], results)).as_posix() if task in elsewhere else "."
        budgets.setdefault(task, {"steps": r["settings"]["steps"], "learning_rate": r["settings"].get("learning_rate"),
                                  "results": folder})
    return runs, budgets


def moved_budgets(budgets: dict[str, dict[str, Any]] | None) -> dict[str, dict[str, Any]]:
    """The budgets (from :func:`gather_runs`) of the tasks whose runs come from another results folder."""
    return {t: b for t, b in (budgets or {}).items() if b["results"] != "."}


def budget_text(budget: dict[str, Any]) -> str:
    """``6000 steps, peak learning rate 0.0005`` (the rate only where one was given)."""
    rate = budget.get("learning_rate")
    return f"{budget['steps']} steps" + ("" if rate is None else f", peak learning rate {rate:g}")


def scheme_of(run: dict[str, Any]) -> str:
    return run["run"].split("-", 1)[1].rsplit("-s", 1)[0]


#: Exact matches are fractions of the examples (k / 100), and their means over lengths carry float rounding
#: ((0.87 + 0.99 + 0.99) / 3 is 0.9499999999999998): a value this close below the threshold has reached it.
ROUNDING = 1e-9


def reaches(value: float | None, threshold: float) -> bool:
    """Whether an exact match (``None``: not measured) reached ``threshold``, up to float rounding (:data:`ROUNDING`)."""
    return value is not None and value >= threshold - ROUNDING


def summary(runs: list[dict[str, Any]], threshold: float = 0.95) -> tuple[list[dict[str, Any]], dict[str, bool]]:
    """Per task and scheme: exact match within and beyond the trained lengths (mean over seeds) and whether the scheme
    learnt the task (every seed at least ``threshold`` within), and which tasks are learnt (by every scheme)."""
    import numpy as np

    rows, learnt = [], {}
    by: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in runs:
        by.setdefault((r["settings"]["task"], scheme_of(r)), []).append(r)
    for (task, scheme), group in sorted(by.items(), key=lambda kv: (TASKS.index(kv[0][0]), list(SCHEMES).index(kv[0][1]))):
        within = [np.mean([x["accuracy"] for x in g["extrapolate"] if x["length"] <= x["train_length"]]) for g in group]
        beyond = [np.mean([x["accuracy"] or 0.0 for x in g["extrapolate"] if x["length"] > x["train_length"]]) for g in group]
        row = {"task": task, "scheme": scheme, "seeds": len(group), "within": float(np.mean(within)),
               "within_min": float(np.min(within)), "learnt": reaches(float(np.min(within)), threshold),
               "beyond": float(np.mean(beyond)), "beyond_by_seed": [float(b) for b in beyond]}
        steps, counted = steps_to_learn(group, threshold)
        if steps is not None:  # over the seeds whose records keep their evaluations, named when not all of them
            row = {**row, "steps_to_learn": steps, **({} if counted == len(group) else {"steps_to_learn_seeds": counted})}
        rows.append(row)
    for row in rows:  # a task is learnt when every scheme learnt it
        learnt[row["task"]] = learnt.get(row["task"], True) and row["learnt"]
    return rows, learnt


def steps_to_learn(group: list[dict[str, Any]], threshold: float) -> tuple[int | str | None, int]:
    """The budget the pilot asks for: the first held-out evaluation at which every seed's exact match reached
    ``threshold`` (the latest over seeds), or ``"not reached"``, and how many seeds that counts. Only seeds whose
    records keep their evaluations count (records made before they did keep none): ``(None, 0)`` if none does."""
    kept = [g for g in group if "evaluations" in g]
    if not kept:
        return None, 0
    firsts = [next((e["step"] for e in g["evaluations"] if reaches(e["eval_exact_match"], threshold)), None) for g in kept]
    return ("not reached" if None in firsts else max(firsts)), len(kept)


#: Exact-match differences below this are ties in the second MRR: about 20 of the 400 answers beyond the trained
#: length (4 lengths x 100 examples), so that a ranking does not rest on a handful of answers.
TIE = 0.05


def mean_reciprocal_rank(rows: list[dict[str, Any]], learnt: dict[str, bool], tie: float = 0.0) -> dict[str, float]:
    """Kazemnejad et al.'s MRR: per learnt task and seed, rank the schemes by exact match beyond the trained lengths
    (ties share the better rank; with ``tie``, scores closer than that count as ties), and average 1 / rank over tasks
    and seeds."""
    ranks: dict[str, list[float]] = {}
    for task in [t for t, ok in learnt.items() if ok]:
        group = [r for r in rows if r["task"] == task]
        for seed in range(min(len(r["beyond_by_seed"]) for r in group)):
            scores = {r["scheme"]: r["beyond_by_seed"][seed] for r in group}
            for scheme, v in scores.items():
                ranks.setdefault(scheme, []).append(1.0 / (1 + sum(w > v + tie for w in scores.values())))
    return {s: sum(v) / len(v) for s, v in ranks.items()}


def step_cell(row: dict[str, Any]) -> str:
    """The steps-to-learn cell: the step, and how many seeds it rests on when some records keep no evaluations."""
    steps = row.get("steps_to_learn")
    if steps is None:
        return "—"
    counted = row.get("steps_to_learn_seeds")
    return str(steps) if counted is None else f"{steps} ({counted} of {row['seeds']} seeds)"


def markdown(rows: list[dict[str, Any]], learnt: dict[str, bool], mrr: dict[str, float], mrr_tied: dict[str, float],
             budgets: dict[str, dict[str, Any]] | None = None, threshold: float = 0.95) -> str:
    """The tables: per task and scheme, then Kazemnejad et al.'s form and the MRR. ``budgets`` (from
    :func:`gather_runs`): tasks whose runs come from another folder are named with their budget. Each row says
    whether its scheme learnt the task (``row["learnt"]`` of :func:`summary`, at ``threshold``) apart from whether
    the task is learnt (by every scheme): a scheme at 1.000 beside a "no" of the task's would read as a scheme
    that failed."""
    budgets = budgets or {}
    steps = any(r.get("steps_to_learn") is not None for r in rows)  # records made before they kept evaluations: no column
    head = " steps to learn |" if steps else ""
    lines = []
    moved = moved_budgets(budgets)
    if moved:
        own = sorted({budget_text(b) for b in budgets.values() if b["results"] == "."})
        lines += ["Budgets: " + "; ".join(f"{t} from [{b['results']}]({b['results']}/table.md) ({budget_text(b)})"
                                          for t, b in moved.items())
                  + (f"; the other tasks {', '.join(own)}." if own else "."), ""]
    lines += [f"| task | scheme | seeds | exact match within (mean, min over seeds) | exact match beyond | scheme learnt it "
              f"(every seed ≥ {threshold:g} within) | task learnt (by every scheme) |{head}",
              "|---|---|---|---|---|---|---|" + ("---|" if steps else "")]
    for r in rows:
        cell = f" {step_cell(r)} |" if steps else ""
        lines.append(f"| {r['task']} | {LABELS[r['scheme']]} | {r['seeds']} | {r['within']:.3f} ({r['within_min']:.3f}) | "
                     f"{r['beyond']:.3f} | {'yes' if r['learnt'] else 'no'} | "
                     f"{'yes' if learnt[r['task']] else 'no'} |{cell}")
    # Kazemnejad et al.'s form: exact match beyond the trained lengths, scheme by task (learnt tasks, mean over seeds)
    tasks = [t for t in TASKS if learnt.get(t)]
    if not tasks:  # a pilot's budget: nothing to rank
        return "\n".join([*lines, "", "No task is learnt by every scheme in every seed: no ranking."]) + "\n"
    seeds = {t: min(r["seeds"] for r in rows if r["task"] == t) for t in tasks}
    head = [f"{t} ({seeds[t]} seed{'s' if seeds[t] > 1 else ''}{f'; {budget_text(moved[t])}' if t in moved else ''}"
            f"{f'; chance {CHANCE[t]}' if t in CHANCE else ''})" for t in tasks]
    lines += ["", "| scheme | " + " | ".join(head) + " |", "|---" * (len(tasks) + 1) + "|"]
    for scheme in [s for s in SCHEMES if any(r["scheme"] == s for r in rows)]:
        cells = [next((f"{r['beyond']:.3f}" for r in rows if r["task"] == t and r["scheme"] == scheme), "—") for t in tasks]
        lines.append(f"| {LABELS[scheme]} | " + " | ".join(cells) + " |")
    # Ordered by the MRR with ties: a gap of a few answers, where no scheme generalises, must not decide the order
    lines += ["", f"| scheme | MRR here, differences below {TIE} tied | MRR here, every difference counts (the paper's rule) "
              "| MRR, Kazemnejad et al. |", "|---|---|---|---|"]
    for s in sorted(mrr, key=lambda s: (-mrr_tied[s], -mrr[s])):
        paper = PAPER_MRR.get(s)
        lines.append(f"| {LABELS[s]} | {mrr_tied[s]:.3f} | {mrr[s]:.3f} | {'—' if paper is None else f'{paper:.3f}'} |")
    return "\n".join(lines) + "\n"


def figure(runs: list[dict[str, Any]], path: Path, budgets: dict[str, dict[str, Any]] | None = None) -> None:
    """Exact match against length, one panel per task, one line per scheme (mean over seeds); dotted: trained length.
    A task whose runs come from another folder (``budgets``) has its budget in its title."""
    import matplotlib

    from posviz.plots.common import new_figure, save_figure

    tasks = [t for t in TASKS if any(r["settings"]["task"] == t for r in runs)]
    cols = min(3, len(tasks))
    rows = -(-len(tasks) // cols)
    fig = new_figure(4.2 * cols, 3.4 * rows)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax in axes[len(tasks):]:
        ax.set_visible(False)
    axes = axes[: len(tasks)]
    colours = matplotlib.colormaps["tab10"]
    moved = moved_budgets(budgets)
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
        if task in CHANCE:
            ax.axhline(CHANCE[task], color="0.5", ls="--", lw=0.8)
            ax.text(ax.get_xlim()[0], CHANCE[task] + 0.02, " chance (a one-bit answer)", fontsize=6.5, color="0.4")
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(f"{task}{f', {budget_text(moved[task])}' if task in moved else ''} (dotted: trained length)", fontsize=9)
        ax.set_xlabel("length (the task's own)", fontsize=8)
        ax.set_ylabel("exact match (greedy)", fontsize=8)
        ax.tick_params(labelsize=7)
    axes[-1].legend(fontsize=6.5, frameon=False)
    save_figure(fig, path, dpi=130)


def attention_picture(runs: list[dict[str, Any]], rows: list[dict[str, Any]], learnt: dict[str, bool]) -> dict[str, Any] | None:
    """Past the trained length, for the best and the worst scheme by exact match beyond, on the learnt task where
    they differ most (else on every task): per length, the normalised entropy and sink mass (means over heads and
    seeds), and the offset profile looking back (mean over layers and seeds). Schemes tied with the worst are named."""
    import numpy as np

    tasks = [t for t in TASKS if any(r["task"] == t for r in rows)]
    if not tasks:
        return None

    def spread(task: str) -> float:
        beyond = [r["beyond"] for r in rows if r["task"] == task]
        return max(beyond) - min(beyond)

    task = max([t for t in tasks if learnt.get(t)] or tasks, key=lambda t: (spread(t), -TASKS.index(t)))
    ranked = sorted((r for r in rows if r["task"] == task), key=lambda r: (-r["beyond"], list(SCHEMES).index(r["scheme"])))
    picture: dict[str, Any] = {"task": task, "spread": spread(task), "schemes": {},
                               "tied_with_worst": [r["scheme"] for r in ranked[:-1] if r["beyond"] == ranked[-1]["beyond"]]}
    for which, row in (("best", ranked[0]), ("worst", ranked[-1])):
        group = [r for r in runs if r["settings"]["task"] == task and scheme_of(r) == row["scheme"]]
        lengths = [x["length"] for x in group[0]["extrapolate"]]
        per = {"scheme": row["scheme"], "beyond": row["beyond"], "lengths": lengths, "train_length": group[0]["settings"]["train_length"]}
        for field in ("entropy_normalised", "sink_mass"):
            per[field] = [float(np.mean([h[field] for g in group for h in g["extrapolate"][j]["heads"] if h[field] is not None]))
                          for j in range(len(lengths))]
        per["profiles"] = {}
        for length in (per["train_length"], lengths[-1]):
            curves = [p["by_distance"] for g in group for p in g.get("profiles", []) if p["length"] == length]
            if curves:
                per["profiles"][str(length)] = [float(x) for x in np.mean(np.array(curves, dtype=float), axis=0)]
        picture["schemes"][which] = per
    return picture


def attention_figure(picture: dict[str, Any], path: Path) -> None:
    """Three panels: normalised entropy and sink mass against length, and the offset profiles (trained and longest length)."""
    from posviz.plots.common import new_figure, save_figure

    fig = new_figure(12.6, 3.6)
    ent, sink, prof = fig.subplots(1, 3)
    for which, colour in (("best", "tab:green"), ("worst", "tab:red")):
        per = picture["schemes"][which]
        ties = picture["tied_with_worst"] if which == "worst" else []
        tied = f"; tied: {', '.join(LABELS[t] for t in ties)}" if ties else ""
        label = f"{which}: {LABELS[per['scheme']]} (beyond {per['beyond']:.3f}{tied})"
        ent.plot(per["lengths"], per["entropy_normalised"], marker="o", ms=3, color=colour, label=label)
        sink.plot(per["lengths"], per["sink_mass"], marker="o", ms=3, color=colour, label=label)
        for (length, curve), style in zip(per["profiles"].items(), ("--", "-"), strict=False):
            prof.plot(range(len(curve)), curve, ls=style, color=colour, lw=1.2, label=f"{LABELS[per['scheme']]}, length {length}")
    for ax, title in ((ent, "entropy / log(keys seen)"), (sink, "sink mass (attention to position 0)")):
        ax.axvline(picture["schemes"]["best"]["train_length"], color="0.4", ls=":", lw=1)
        ax.set_xlabel("length (the task's own; dotted: trained)", fontsize=8)
        ax.set_ylim(0, 1.05)
        ax.set_title(title, fontsize=9)
    prof.set_xlabel("distance back from the query (tokens)", fontsize=8)
    prof.set_ylabel("mean attention weight", fontsize=8)
    prof.set_title("offset profile (dashed: trained length; solid: longest)", fontsize=9)
    ent.legend(fontsize=6.5, frameon=False)
    prof.legend(fontsize=6, frameon=False)
    fig.suptitle(f"{picture['task']}: attention of the best and the worst scheme past the trained length "
                 "(means over heads, layers and seeds)", fontsize=9)
    save_figure(fig, path, dpi=130)


def tabulate(args: argparse.Namespace) -> list[Path]:
    from posviz.util.atomic import write_text_atomic

    runs, budgets = gather_runs(args.results, args.task_results)
    if not runs:
        return []
    rows, learnt = summary(runs, args.learnt)
    mrr, mrr_tied = mean_reciprocal_rank(rows, learnt), mean_reciprocal_rank(rows, learnt, TIE)
    picture = attention_picture(runs, rows, learnt)
    machines = sorted({json.dumps(r["machine"], sort_keys=True) for r in runs if "machine" in r})
    out = [args.results / "table.md", args.results / "table.json", args.results / "figure.png", args.results / "attention.png"]
    write_text_atomic(out[0], markdown(rows, learnt, mrr, mrr_tied, budgets, args.learnt))
    write_text_atomic(out[1], json.dumps({"rows": rows, "learnt": learnt, "budgets": budgets, "mrr": mrr, "mrr_tie": TIE,
                                          "mrr_with_ties": mrr_tied, "paper_mrr": PAPER_MRR,
                                          "attention": picture, "machines": [json.loads(m) for m in machines]}, indent=1) + "\n")
    figure(runs, out[2], budgets)
    if picture is not None:
        attention_figure(picture, out[3])
    return out[:3] if picture is None else out


def compare_runs(shipped: Path, rerun: Path, atol: float) -> int:
    """Print a rerun of one run against its shipped record, length by length; 0 when they were made from the same
    data and budget and every exact match agrees within ``atol``, else 1.

    Exact match is what the tables show. A rerun on another device (the CPU for runs made on a GPU) rounds
    differently, and 3000 steps carry that into the weights, so losses differ in their second digit while the
    answers, right or wrong, mostly stay (two copy runs measured: exact match equal at every length)."""
    a, b = (json.loads(p.read_text(encoding="utf-8")) for p in (shipped, rerun))
    same = [k for k in ("size", "steps", "batch_size", "learning_rate", "seed", "scheme", "task", "train_length")
            if a["settings"].get(k) != b["settings"].get(k)]
    if a["settings"]["task_data"] != b["settings"]["task_data"] or a["test_data"]["sha256"] != b["test_data"]["sha256"]:
        same.append("data")
    if same:
        print(f"{a['run']}: the rerun differs in {', '.join(same)}; nothing compared")
        return 1
    print(f"{a['run']}: shipped on {a.get('machine', {}).get('device', 'an unrecorded device')}, rerun on "
          f"{b.get('machine', {}).get('device', 'an unrecorded device')}; held-out loss {a['eval_loss']:.5f} vs {b['eval_loss']:.5f}")
    worst = 0.0
    for x, y in zip(a["extrapolate"], b["extrapolate"], strict=True):
        diff = abs((x["accuracy"] or 0.0) - (y["accuracy"] or 0.0))
        worst = max(worst, diff)
        print(f"  length {x['length']:>3}: exact match {x['accuracy']} vs {y['accuracy']}, token accuracy "
              f"{x['token_accuracy']:.3f} vs {y['token_accuracy']:.3f}, loss {x['loss']:.4f} vs {y['loss']:.4f}")
    print(f"largest exact-match difference {worst:.3f} (accepted: {atol})")
    return 0 if worst <= atol else 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.compare:
        return compare_runs(*args.compare, args.atol)
    if args.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # the Trainer takes a GPU whenever it sees one; before torch looks
    if args.phase == "all" and args.workers > 1:
        run_workers(args, argv)
    elif args.phase == "all":
        run_experiment(args)
    for path in [] if args.no_tables else tabulate(args):
        _say(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
