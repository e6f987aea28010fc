"""Compare a rerun of a shipped training run with the shipped numbers, metric by metric.

A shipped run is reproduced by running its experiment script again for that run alone,
into scratch folders, then comparing every logged evaluation (and, for Table 3 runs,
every fine-tuning record of the seeds rerun) with what is committed::

    # one run of TISA's Table 3 (pre-training, then fine-tuning seed 0 on the three tasks)
    OMP_NUM_THREADS=1 .venv/bin/python scripts/tisa_table3.py --configs a-S3 --seeds 0 --finetune-seeds 0 \\
        --results /tmp/rerun/t3 --out /tmp/rerun/t3runs
    .venv/bin/python scripts/compare_rerun.py reports/tisa-table3/runs/a-S3-s0 /tmp/rerun/t3/runs/a-S3-s0

    # one run of train short, test long (its record: RESULTS/runs/NAME.json)
    OMP_NUM_THREADS=1 .venv/bin/python scripts/train_short_test_long.py --schemes rope --seeds 0 \\
        --results /tmp/rerun/tstl --out /tmp/rerun/tstlruns
    .venv/bin/python scripts/compare_rerun.py reports/train-short-test-long/runs/rope-s0.json /tmp/rerun/tstl/runs/rope-s0.json

    # one run of the miniature ALBERT v1 -> v2 (its run folder holds trajectory.json)
    OMP_NUM_THREADS=1 .venv/bin/python scripts/albert_v1_v2.py --steps 1000 --eval-every 50 --seeds 0 --out /tmp/rerun/av
    .venv/bin/python scripts/compare_rerun.py reports/albert-v1-v2 /tmp/rerun/av/v1-s0 --run v1-s0

Exit status 0 when every logged number agrees within ``--rtol`` (relative; default 1e-3), every fine-tuning
score within ``--finetune-atol`` points (default 0.25: 5 of 2000 dev examples) or else within the range of the
shipped run's fine-tuning seeds (1000 fine-tuning steps amplify the pre-trained weights' last-digit differences
into seed-sized ones; a rerun that lands among the shipped seeds moves no Table 3 cell, a median over seeds shown
with its range, outside that range), and
the two runs were made from the same corpus (``corpus_sha256``) and data
(``data_fingerprint``); 1 otherwise. The largest relative difference per metric is
printed, so a rerun says how closely it agrees, not only whether.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from pathlib import Path
from typing import Any


def shipped_evaluations(folder: Path, run: str | None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The shipped run's settings and evaluations: a run folder's trajectory.json, or a row set of albert_v1_v2."""
    if (folder / "trajectory.json").is_file():
        doc = json.loads((folder / "trajectory.json").read_text(encoding="utf-8"))
        return doc["run"], doc["evaluations"]
    settings = json.loads((folder / "albert_v1_v2.json").read_text(encoding="utf-8"))["settings"]
    with open(folder / "albert_v1_v2_evaluations.csv", newline="", encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f) if r["run"].endswith(f"/{run}")]
    if not rows:
        raise SystemExit(f"error: no run {run!r} in {folder / 'albert_v1_v2_evaluations.csv'}")
    return settings, [{k: _number(v) for k, v in r.items()} for r in rows]


def _number(v: str) -> Any:
    try:
        return float(v) if v != "" else None
    except ValueError:
        return v


def differences(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> dict[str, float]:
    """The largest relative difference per metric over the evaluations both logs hold (by step)."""
    by_step = {int(r["step"]): r for r in b}
    worst: dict[str, float] = {}
    for r in a:
        other = by_step.get(int(r["step"]))
        if other is None:
            continue
        for k, v in r.items():
            w = other.get(k)
            if isinstance(v, (int, float)) and isinstance(w, (int, float)) and k != "step":
                rel = abs(v - w) / max(abs(v), abs(w), 1e-12)
                worst[k] = max(worst.get(k, 0.0), rel)
    return worst


def _leaves(doc: Any, path: str = "") -> dict[str, Any]:
    """Every leaf of a JSON document by its path (``extrapolate[2].heads[5].entropy``)."""
    if isinstance(doc, dict):
        return {k: v for key, value in doc.items() for k, v in _leaves(value, f"{path}.{key}" if path else key).items()}
    if isinstance(doc, list):
        return {k: v for i, value in enumerate(doc) for k, v in _leaves(value, f"{path}[{i}]").items()}
    return {path: doc}


def record_differences(a: Any, b: Any) -> tuple[dict[str, float], list[str]]:
    """Two result records (JSON) of the same run: the largest relative difference per metric (the leaf's key, over
    every record and head), and the leaves that must be equal and are not (a missing leaf, a hash, a count).

    Strings other than hashes name where a run lay (its folder, the corpus file) and are not compared. A leaf the
    rerun has and the shipped record lacks is a measurement today's code adds (the loss by position, say): it is
    not shipped, so there is nothing to reproduce (:func:`new_in_rerun` lists them); a shipped leaf the rerun lacks
    is a difference.
    """
    left, right = _leaves(a), _leaves(b)
    worst: dict[str, float] = {}
    unequal = [f"{k}: only in the shipped record" for k in sorted(left.keys() - right.keys())]
    for k in sorted(left.keys() & right.keys()):
        v, w = left[k], right[k]
        metric = k.rsplit(".", 1)[-1].split("[")[0]
        if isinstance(v, float) or isinstance(w, float):
            if v is None or w is None:
                unequal += [] if v is w else [f"{k}: shipped {v}, rerun {w}"]
                continue
            rel = 0.0 if v == w else abs(v - w) / max(abs(v), abs(w), 1e-6)  # 1e-6: statistics that are zero up to rounding
            worst[metric] = max(worst.get(metric, 0.0), rel)
        elif isinstance(v, str) and isinstance(w, str) and "sha256" not in metric:
            continue
        elif v != w:
            unequal.append(f"{k}: shipped {v}, rerun {w}")
    return worst, unequal


def new_in_rerun(a: Any, b: Any) -> list[str]:
    """The kinds of leaf (their last key) that only the rerun ``b`` has: measurements added since ``a`` was made."""
    return sorted({k.rsplit(".", 1)[-1].split("[")[0] for k in _leaves(b).keys() - _leaves(a).keys()})


def finetune_differences(shipped: Path, rerun: Path) -> dict[str, tuple[float, float, float, float]]:
    """Every fine-tuning record the rerun holds (same step, task, seed, metric): the rerun's value, its absolute
    difference from the shipped one in the metric's points, and the range of the shipped run's fine-tuning seeds."""
    found: dict[str, tuple[float, float, float, float]] = {}
    for path in sorted((rerun / "finetune").glob("*/*.json")):
        other = shipped / "finetune" / path.parent.name / path.name
        if not other.is_file():
            continue
        records = [r for r in json.loads(other.read_text())["records"] if r["seed"] != "median"]
        theirs = {(r["seed"], r["metric"]): r["value"] for r in records}
        for r in json.loads(path.read_text())["records"]:
            key = (r["seed"], r["metric"])
            if r["seed"] != "median" and key in theirs:
                seeds = [x["value"] for x in records if x["metric"] == r["metric"]]
                name = f"{path.parent.name}/{path.stem} seed {r['seed']} {r['metric']}"
                # scores are multiples of 100 / N points (N dev examples): rounded to 1e-9, the difference of two is
                # that multiple exactly (93.60000000000001 - 93.35 is 5 examples of 2000, the default tolerance)
                found[name] = (r["value"], round(abs(r["value"] - theirs[key]), 9), min(seeds), max(seeds))
    return found


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("shipped", type=Path, help="the shipped run folder (or reports/albert-v1-v2 with --run, or a result record .json)")
    p.add_argument("rerun", type=Path, help="the rerun's folder (holding trajectory.json), or its result record .json")
    p.add_argument("--run", help="which run of reports/albert-v1-v2 (v1-s0, v2-s1, ...)")
    p.add_argument("--rtol", type=float, default=1e-3, help="largest relative difference accepted (default: 1e-3)")
    p.add_argument("--finetune-atol", type=float, default=0.25,
                   help="largest difference of a fine-tuning score accepted, in points (default: 0.25, 5 of 2000 dev examples)")
    args = p.parse_args()
    if args.shipped.suffix == ".json":  # one result record (train_short_test_long.py's RESULTS/runs/NAME.json)
        worst, unequal = record_differences(json.loads(args.shipped.read_text(encoding="utf-8")),
                                            json.loads(args.rerun.read_text(encoding="utf-8")))
        print(f"{len(worst)} metrics compared, largest relative difference:")
        for k, v in sorted(worst.items()):
            print(f"  {k:60s} {v:.1e}{'' if v <= args.rtol else '   <-- beyond --rtol'}")
        for line in unequal[:20]:
            print(f"  {line}   <-- differs")
        added = new_in_rerun(json.loads(args.shipped.read_text(encoding="utf-8")), json.loads(args.rerun.read_text(encoding="utf-8")))
        if added:
            print(f"  new in the rerun, not shipped (not compared): {', '.join(added)}")
        ok = bool(worst) and not unequal and all(v <= args.rtol for v in worst.values())
        print("agrees" if ok else "differs")
        return 0 if ok else 1
    settings, shipped = shipped_evaluations(args.shipped, args.run)
    doc = json.loads((args.rerun / "trajectory.json").read_text(encoding="utf-8"))
    ok = True
    for key in ("corpus_sha256", "data_fingerprint"):
        if key in settings and settings[key] != doc["run"].get(key):
            print(f"{key}: shipped {settings[key]}, rerun {doc['run'].get(key)}")
            ok = False
    worst = differences(shipped, doc["evaluations"])
    steps = sorted({int(r["step"]) for r in shipped} & {int(r["step"]) for r in doc["evaluations"]})
    print(f"{len(steps)} evaluations compared (steps {steps[0]}-{steps[-1]}), largest relative difference:"
          if steps else "no common evaluation")
    for k, v in sorted(worst.items()):
        flag = "" if v <= args.rtol else "   <-- beyond --rtol"
        print(f"  {k:60s} {v:.1e}{flag}")
        ok &= v <= args.rtol or math.isnan(v)
    tuned = finetune_differences(args.shipped, args.rerun) if args.run is None else {}
    if tuned:
        print("fine-tuning records compared, absolute difference in points:")
    for k, (value, diff, lo, hi) in sorted(tuned.items()):
        within = lo <= value <= hi
        flag = ("" if diff <= args.finetune_atol else f"   (within the shipped seeds' {lo:.2f}-{hi:.2f})" if within
                else "   <-- beyond --finetune-atol and the shipped seeds' range")
        print(f"  {k:60s} {diff:.2f}{flag}")
        ok &= diff <= args.finetune_atol or within or math.isnan(diff)
    print("agrees" if ok and steps else "differs")
    return 0 if ok and steps else 1


if __name__ == "__main__":
    sys.exit(main())
