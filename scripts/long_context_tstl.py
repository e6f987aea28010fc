"""Long context in miniature: sink rate, effective span and the positional-bias curve of the train-short-test-long runs
from 1x to 64x their training length.

The runs are those of ``scripts/train_short_test_long.py`` (seven schemes x 3 seeds, causal, tiny, L = 64 tokens),
retrained with ``--keep-runs`` so that their checkpoints exist: training is seeded and deterministic on a CPU, and this
script refuses a run whose final held-out loss is not the shipped one (``reports/train-short-test-long/runs``, to
1e-6 relative), so the weights measured here are those whose losses are shipped. Each run is then read by
``posviz.attention`` (the tiled path: the model keeps its own SDPA; queries and keys are captured per layer) on the
held-out text (its SHA-256 checked against the shipped ``experiment.json``) at ``--factors`` x L, 64 to 4,096 tokens,
every layer, with one token budget per length (``--tokens``, 16,384: 256 windows of 64, 4 of 4,096), so that every
length reads the same text:

* **sink rate** (Gu et al., ICLR 2025): the share of a run's heads (4 layers x 4 heads) whose mean attention to the
  first token of the window exceeds eps = 0.3;
* **effective span**: per query, the distance holding 50 % / 90 % of its attention, its mean over queries and heads;
* **attention received** by each key position, averaged over the queries that see it (the positional-bias curve), in
  32 equal buckets of relative position, averaged over heads.

A run is one unit of work: measure, write ``RESULTS/runs/NAME.json`` (with the checkpoint's SHA-256 and the corpus
hash), skip it when that file exists. ``--phase tabulate`` rewrites ``table.md``/``.csv``/``.json`` and
``figure.png`` from the run records alone and refuses records made from another text or other settings.

Usage (from the repository root)::

    # the checkpoints (about an hour on one core; results of that script go to a scratch folder)
    OMP_NUM_THREADS=1 .venv/bin/python scripts/train_short_test_long.py --keep-runs --out runs/long-context/tstl \\
        --results runs/long-context/tstl-results
    OMP_NUM_THREADS=1 .venv/bin/python scripts/long_context_tstl.py --runs runs/long-context/tstl
    .venv/bin/python scripts/long_context_tstl.py --phase tabulate
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from albert_v1_v2 import finished  # noqa: E402  (scripts share their bookkeeping)
from train_short_test_long import LABELS, SCHEMES, _mean_sd, run_name  # noqa: E402

SHIPPED = Path(__file__).resolve().parents[1] / "reports" / "train-short-test-long"  # the gallery's verify runs from elsewhere
#: Gu et al. (ICLR 2025), Table 3: sink rate (%) of 60M-parameter models at T = 64, and which of posviz's schemes each is.
GU_TABLE3 = {"none": ("NoPE", 20.35), "sinusoidal": ("absolute", 32.73), "absolute": ("learnable", 33.13),
             "t5": ("relative", 35.53), "alibi": ("ALiBi", 20.78), "rope": ("RoPE", 18.18)}
BUCKETS = 32  # relative-position buckets of the received curve
SINK_EPS = 0.3


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--phase", default="all", choices=("all", "tabulate"), help="measure the runs, or only tabulate (default: all)")
    p.add_argument("--runs", type=Path, default=Path("runs/long-context/tstl"), help="the checkpoints of train_short_test_long.py --keep-runs")
    p.add_argument("--results", type=Path, default=Path("reports/long-context-miniature"), help="folder of the results")
    p.add_argument("--factors", default="1,2,4,8,16,32,64", help="lengths as multiples of the training length (default: %(default)s)")
    p.add_argument("--tokens", type=int, default=16384, help="tokens read at every length (default: %(default)s)")
    p.add_argument("--shard", default="0/1", help="K/N: measure every N-th run from the K-th (default: 0/1)")
    p.add_argument("--compare", nargs=2, type=Path, metavar=("SHIPPED", "RERUN"), help="compare two run records and exit")
    args = p.parse_args(argv)
    args.shard_k, args.shard_n = (int(x) for x in args.shard.split("/"))
    args.factor_list = [int(x) for x in args.factors.split(",")]
    return args


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def experiment(args: argparse.Namespace) -> dict[str, Any]:
    """The shipped experiment's settings, with the held-out text's identity checked against it."""
    from posviz.train.corpus import corpus_identity, load_corpus

    shipped = json.loads((SHIPPED / "experiment.json").read_text(encoding="utf-8"))
    heldout = args.runs / "corpus" / "heldout.txt"
    got = corpus_identity(load_corpus([str(heldout)]))["corpus_sha256"]
    if got != shipped["heldout_corpus_sha256"]:
        raise SystemExit(f"error: {heldout} is not the shipped held-out text (SHA-256 {got}, shipped {shipped['heldout_corpus_sha256']})")
    return shipped


def settings(args: argparse.Namespace, shipped: dict[str, Any]) -> dict[str, Any]:
    """What every run record must share: the text, the lengths, the budget, the statistic's threshold."""
    return {"heldout_corpus_sha256": shipped["heldout_corpus_sha256"], "training_length": shipped["seq_len"],
            "factors": args.factor_list, "tokens": args.tokens, "sink_eps": SINK_EPS, "buckets": BUCKETS, "path": "tiled"}


def measure_run(args: argparse.Namespace, shipped: dict[str, Any], scheme: str, seed: int) -> dict[str, Any]:
    """One run's statistics at every length (the learned table only at its own length)."""
    import warnings

    import posviz
    from posviz.errors import PosvizError
    from posviz.train.log import load_run_log

    warnings.filterwarnings("ignore", message=".*the statistics describe extrapolation")  # past L is the point here
    name = run_name(scheme, seed)
    run = args.runs / name
    steps = shipped["steps"]
    last = load_run_log(run)["evaluations"][-1]
    reference = json.loads((SHIPPED / "runs" / f"{name}.json").read_text(encoding="utf-8"))
    if last["step"] != steps or not math.isclose(last["eval_loss"], reference["eval_loss"], rel_tol=1e-6):
        raise SystemExit(f"error: {run}: final held-out loss {last['eval_loss']} at step {last['step']} is not the shipped "
                         f"{reference['eval_loss']} at step {steps}: not the shipped run's weights")
    checkpoint = run / f"checkpoint-{steps}" / "model.safetensors"
    record: dict[str, Any] = {"run": name, "scheme": scheme, "seed": seed, "eval_loss": last["eval_loss"],
                              "checkpoint_sha256": _sha256(checkpoint), **settings(args, shipped), "lengths": []}
    L = shipped["seq_len"]
    for factor in args.factor_list:
        n = L * factor
        try:
            result = posviz.attention(str(run), corpus=str(args.runs / "corpus" / "heldout.txt"), seq_len=n, layers="all",
                                      max_blocks=args.tokens // n, batch_size=max(1, 2048 // n), sink_eps=SINK_EPS)
        except PosvizError as e:  # the learned table past its rows
            record["lengths"].append({"length": n, "factor": factor, "reason": str(e).splitlines()[0]})
            _say(f"{name} at {n}: {e}")
            continue
        record["lengths"].append(_length_record(result, n, factor))
        _say(f"{name} at {n}: {result.blocks} windows, method {result.method}")
    return record


def _length_record(result: Any, n: int, factor: int) -> dict[str, Any]:
    """Per layer: every head's sink mass, normalised entropy and spans; the received curve (mean over heads)."""
    import numpy as np

    layers = {}
    for layer in result.layers:
        st = result.stats[layer]
        starts = (np.arange(BUCKETS) * n) // BUCKETS
        received = np.add.reduceat(st.received, starts, axis=-1) / np.diff(np.append(starts, n))
        layers[str(layer)] = {"sink_mass": st.sink_mass.tolist(), "entropy_normalised": st.entropy_normalised.tolist(),
                              "span50": st.span50.tolist(), "span90": st.span90.tolist(),
                              "span90_median": st.span90_quantiles[:, 1].tolist(),
                              "received": received.mean(axis=0).tolist()}
    return {"length": n, "factor": factor, "windows": result.blocks, "method": result.method, "corpus": result.corpus,
            "layers": layers}


def run_all(args: argparse.Namespace) -> None:
    from posviz.util.atomic import write_text_atomic

    shipped = experiment(args)
    todo = [(scheme, seed) for seed in shipped["seeds"] for scheme in SCHEMES]
    for i, (scheme, seed) in enumerate(todo):
        if i % args.shard_n != args.shard_k:
            continue
        target = args.results / "runs" / f"{run_name(scheme, seed)}.json"
        if target.is_file():
            continue
        if not finished(args.runs / run_name(scheme, seed), shipped["steps"]):
            _say(f"{run_name(scheme, seed)}: no finished run in {args.runs} yet, skipped")
            continue
        record = measure_run(args, shipped, scheme, seed)
        target.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(target, json.dumps(record, indent=1) + "\n")
        tabulate(args)


# --- tables and figure -------------------------------------------------------------------------------------------


def load_records(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every run record, refusing a mix made from other text or other settings."""
    records = [json.loads(p.read_text(encoding="utf-8")) for p in sorted((args.results / "runs").glob("*.json"))]
    keys = ("heldout_corpus_sha256", "training_length", "factors", "tokens", "sink_eps", "buckets", "path")
    kinds = {json.dumps({k: r[k] for k in keys}, sort_keys=True) for r in records}
    if len(kinds) > 1:
        raise SystemExit(f"error: the records in {args.results / 'runs'} were made with different texts or settings: {sorted(kinds)}")
    return records


def summary_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (scheme, length): sink rate, span and entropy over seeds (mean ± sd of the per-run values)."""
    import numpy as np

    by: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in records:
        for rec in r["lengths"]:
            if "layers" in rec:
                by.setdefault((r["scheme"], rec["length"]), []).append(rec)
    rows = []
    for (scheme, n), recs in sorted(by.items(), key=lambda kv: (SCHEMES.index(kv[0][0]), kv[0][1])):
        per_run = {name: [] for name in ("sink_rate", "span50", "span90", "entropy_normalised", "sink_mass")}
        curves = []
        for rec in recs:
            heads = {k: np.concatenate([layer[k] for layer in rec["layers"].values()])
                     for k in ("sink_mass", "span50", "span90", "entropy_normalised")}
            per_run["sink_rate"].append(100.0 * float(np.mean(heads["sink_mass"] > SINK_EPS)))
            for k in ("span50", "span90", "entropy_normalised", "sink_mass"):
                per_run[k].append(float(np.mean(heads[k])))
            curves.append(np.mean([layer["received"] for layer in rec["layers"].values()], axis=0))
        row: dict[str, Any] = {"scheme": scheme, "length": n, "factor": recs[0]["factor"], "seeds": len(recs)}
        for k, values in per_run.items():
            row[f"{k}_mean"], row[f"{k}_sd"] = _mean_sd(values)
            row[f"{k}_min"], row[f"{k}_max"] = min(values), max(values)
        row["received"] = np.mean(curves, axis=0).tolist()
        rows.append(row)
    return rows


def uniform_span90(n: int) -> float:
    """span90 of causal attention spread evenly over the keys each query sees (query i: i + 1 keys), averaged over
    queries 1 ... n - 1: the reference for a head that does not prefer near keys (about 0.45 n)."""
    import numpy as np

    i = np.arange(1, n)
    return float(np.mean(np.ceil(0.9 * (i + 1) - 1e-9) - 1))


def markdown_tables(rows: list[dict[str, Any]], factors: list[int], train_length: int) -> str:
    """Sink rate and span90 per scheme and length, then the sink rate at L beside Gu et al.'s Table 3."""
    def cell(row: dict[str, Any] | None, key: str, fmt: str, spread: str) -> str:
        if row is None:
            return "n/a"
        if spread == "range":  # a share of 16 heads: the seeds' range says more than a standard deviation
            return f"{row[key + '_mean']:{fmt}} [{row[key + '_min']:{fmt}}–{row[key + '_max']:{fmt}}]"
        return f"{row[key + '_mean']:{fmt}} ± {row[key + '_sd']:{fmt}}"

    def table(title: str, key: str, fmt: str, spread: str = "sd") -> list[str]:
        lines = [f"**{title}**", "", "| scheme | " + " | ".join(f"{train_length * f} ({f}L)" for f in factors) + " |",
                 "|" + " --- |" * (len(factors) + 1)]
        for scheme in SCHEMES:
            cells = []
            for f in factors:
                row = next((r for r in rows if r["scheme"] == scheme and r["factor"] == f), None)
                cells.append(cell(row, key, fmt, spread))
            if any(c != "n/a" for c in cells):
                lines.append(f"| {LABELS[scheme]} | " + " | ".join(cells) + " |")
        return lines + [""]

    out = table("Sink rate (%): heads whose mean attention to the first token exceeds 0.3; mean [range] over seeds",
                "sink_rate", ".1f", "range")
    span = table("Effective span: mean distance holding 90 % of a query's attention (tokens)", "span90", ".1f")
    span.insert(-1, "| uniform attention (reference) | " + " | ".join(f"{uniform_span90(train_length * f):.1f}" for f in factors) + " |")
    out += span
    out += table("Sink mass: mean attention to the first token, over every head", "sink_mass", ".3f")
    out += table("Normalised attention entropy (entropy / log keys seen)", "entropy_normalised", ".3f")
    out += ["**Sink rate at the training length beside Gu et al. (ICLR 2025), Table 3**", "",
            "| scheme here | Gu et al.'s name | Gu et al. (60M, %) | here (tiny, %: mean [range] over seeds) |", "| --- | --- | --- | --- |"]
    for scheme, (theirs, value) in GU_TABLE3.items():
        row = next((r for r in rows if r["scheme"] == scheme and r["factor"] == 1), None)
        here = cell(row, "sink_rate", ".1f", "range")
        out.append(f"| {LABELS[scheme]} | {theirs} | {value:.2f} | {here} |")
    return "\n".join(out) + "\n"


def figure(rows: list[dict[str, Any]], train_length: int, path: Path) -> None:
    """Sink rate and span90 against length; the received curve at L and at the longest length."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    schemes = [s for s in SCHEMES if any(r["scheme"] == s for r in rows)]
    colours = plt.get_cmap("tab10")
    fig, axes = plt.subplots(1, 4, figsize=(17, 4.6), constrained_layout=True)
    longest = max(r["length"] for r in rows)
    for i, s in enumerate(schemes):
        pts = sorted((r for r in rows if r["scheme"] == s), key=lambda r: r["length"])
        x = [r["length"] for r in pts]
        mean = [r["sink_rate_mean"] for r in pts]  # whiskers: the seeds' range (a share of 16 heads is never below 0)
        spread = [[m - r["sink_rate_min"] for m, r in zip(mean, pts, strict=True)], [r["sink_rate_max"] - m for m, r in zip(mean, pts, strict=True)]]
        axes[0].errorbar(x, mean, yerr=spread, marker="o", ms=4, capsize=3, color=colours(i), label=LABELS[s], alpha=0.85)
        axes[1].errorbar(x, [r["span90_mean"] for r in pts], yerr=[r["span90_sd"] for r in pts], marker="o", ms=4, capsize=3,
                         color=colours(i))
        for ax, n in ((axes[2], train_length), (axes[3], longest)):
            row = next((r for r in pts if r["length"] == n), None)
            if row is not None:
                centres = (np.arange(BUCKETS) + 0.5) / BUCKETS
                ax.plot(centres, row["received"], color=colours(i), marker=".", label=LABELS[s])
    lengths = sorted({r["length"] for r in rows})
    axes[1].plot(lengths, [uniform_span90(n) for n in lengths], color="0.4", ls=":", lw=1.2, label="uniform causal attention")
    for ax in axes[:2]:
        ax.axvline(train_length, color="0.3", ls="--", lw=1)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("window length (tokens)")
    axes[1].set_yscale("log", base=2)
    axes[0].set_ylabel("sink rate (% of heads, first-token attention > 0.3)")
    axes[0].set_title("Sink rate against length (mean, range over seeds)")
    axes[0].legend(fontsize=7)
    axes[1].set_ylabel("span90 (tokens)")
    axes[1].set_title("Distance holding 90 % of a query's attention (mean ± sd)")
    axes[1].legend(fontsize=7)
    for ax, n in ((axes[2], train_length), (axes[3], longest)):
        ax.set_yscale("log")
        ax.set_xlabel("key position / window length")
        ax.set_ylabel("attention received (mean over the queries that see it)")
        ax.set_title(f"Positional-bias curve at n = {n} ({n // train_length}L)")
    axes[3].legend(fontsize=7)
    fig.suptitle(f"Long context in miniature: causal LMs trained at L = {train_length} tokens, read at 1-{longest // train_length}L "
                 "(held-out text, every layer, 3 seeds)")
    tmp = path.with_name(path.stem + ".tmp" + path.suffix)
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)


def tabulate(args: argparse.Namespace) -> list[Path]:
    from posviz.util.atomic import write_text_atomic
    from posviz.util.tables import to_csv

    records = load_records(args)
    if not records:
        return []
    train_length = records[0]["training_length"]
    rows = summary_rows(records)
    out = args.results
    write_text_atomic(out / "table.md", markdown_tables(rows, records[0]["factors"], train_length))
    write_text_atomic(out / "table.csv", to_csv([{k: v for k, v in r.items() if k != "received"} for r in rows]))
    write_text_atomic(out / "table.json", json.dumps(rows, indent=1) + "\n")
    figure(rows, train_length, out / "figure.png")
    return [out / "table.md", out / "table.csv", out / "table.json", out / "figure.png"]


#: Relative tolerance of a rerun that measured the shipped checkpoint's very bytes: only the measurement was rerun.
SAME_CHECKPOINT_RTOL = 1e-5
#: Relative tolerance of a rerun that trained the checkpoint again (its bytes differ: another machine's float rounding
#: moves the weights' last digits over 600 steps), as scripts/compare_rerun.py accepts for every retrained run.
RETRAINED_RTOL = 1e-3


def compare(shipped: Path, rerun: Path, rtol: float | None = None) -> int:
    """Compare a rerun's record with the shipped one, number by number; 0 when every number agrees within ``rtol``.

    The checkpoint's SHA-256 is not compared but chooses the tolerance when ``rtol`` is None:
    :data:`SAME_CHECKPOINT_RTOL` when the rerun measured the same bytes, :data:`RETRAINED_RTOL` when it retrained them.
    """
    a, b = (json.loads(p.read_text(encoding="utf-8")) for p in (shipped, rerun))
    if rtol is None:
        same = a.get("checkpoint_sha256") == b.get("checkpoint_sha256")
        rtol = SAME_CHECKPOINT_RTOL if same else RETRAINED_RTOL
        print(f"checkpoints: {'the same bytes' if same else 'retrained (other bytes)'}: tolerance {rtol:g}")
    worst, problems = 0.0, []

    def walk(x: Any, y: Any, where: str) -> None:
        nonlocal worst
        if isinstance(x, dict) and isinstance(y, dict):
            for k in sorted(set(x) | set(y)):
                if k == "checkpoint_sha256":
                    continue
                if k not in x or k not in y:
                    problems.append(f"{where}{k}: in one record only")
                else:
                    walk(x[k], y[k], f"{where}{k}.")
        elif isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
            for i, (u, v) in enumerate(zip(x, y, strict=True)):
                walk(u, v, f"{where}{i}.")
        elif isinstance(x, float) or isinstance(y, float):
            diff = abs(x - y) / max(abs(x), abs(y), 1e-12)
            worst = max(worst, diff)
            if diff > rtol:
                problems.append(f"{where.rstrip('.')}: {x} against {y}")
        elif x != y:
            problems.append(f"{where.rstrip('.')}: {x!r} against {y!r}")

    walk(a, b, "")
    print(f"{rerun.name}: largest relative difference {worst:.2e} (tolerance {rtol:g}); {len(problems)} disagreements")
    for line in problems[:10]:
        print(f"  {line}")
    return 1 if problems else 0


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    if args.phase == "all":
        run_all(args)
    written = tabulate(args)
    _say("written: " + ", ".join(str(p) for p in written) if written else "no run records yet")
    return 0


if __name__ == "__main__":
    sys.exit(main())
