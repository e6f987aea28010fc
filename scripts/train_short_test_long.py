"""Train short, test long, in miniature: causal LMs with seven positional schemes, evaluated from 0.5x to 8x their length.

Press, Smith & Lewis (ICLR 2022, "Train Short, Test Long") train language models at a length L and evaluate them at
L + k: sinusoidal stops improving around k = 20-50 and then degrades, rotary improves to about k = 100-200, the T5
bias to about 2L, and ALiBi keeps improving to about 3L. This script asks the same question at a size that fits a
2-core CPU, with ``posviz train --objective causal`` and ``posviz.extrapolate``:

* schemes: ``absolute`` (a learned table: it cannot run past L, and says so), ``sinusoidal``, ``rope``, ``alibi``,
  ``t5``, ``tisa`` (S = 3 kernels, no table) and ``none`` (NoPE: the causal mask is its only source of order);
* every scheme with ``--seeds`` (0 1 2), one budget: the same steps, batch, block length L (``--seq-len``, 64),
  learning rate and model size (tiny: 4 layers x 128, 4 heads);
* the text is the packaged demo corpus, split by document before anything is trained: every tenth document is held
  out (``heldout.txt``), the rest is the training corpus (``train.txt``); both are written from the packaged corpus
  and recorded by SHA-256, so a rerun anywhere trains and scores on the same bytes;
* every run is scored by ``posviz.extrapolate`` on the held-out text at ``--factors`` x L (0.5, 1, 1.25, 1.5, 2, 3, 4, 8): mean
  next-token loss over non-overlapping windows cut from one fixed token budget, so every length scores the same
  tokens; per layer and head, the attention entropy, its largest weight and the sink mass on the first token.

A run is one unit of work: train, evaluate, write ``RESULTS/runs/NAME.json`` (the run's settings, its final training
and held-out loss, and the extrapolate records), then delete the run's checkpoints (``--keep-runs`` keeps them). A
run whose JSON is in ``RESULTS/runs`` is skipped, so the experiment resumes from the results alone; an interrupted
run resumes from its folder in ``--out``. The tables and figures are rewritten from ``RESULTS/runs`` after every run,
and by ``--phase tabulate`` alone.

Usage (from the repository root)::

    # two background processes that share the runs (one core each)
    OMP_NUM_THREADS=1 .venv/bin/python scripts/train_short_test_long.py --shard 0/2 &
    OMP_NUM_THREADS=1 .venv/bin/python scripts/train_short_test_long.py --shard 1/2 &
    # the tables and figures from whatever has finished
    .venv/bin/python scripts/train_short_test_long.py --phase tabulate

The settings are recorded in ``RESULTS/experiment.json``; a rerun with other settings is refused.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from albert_v1_v2 import check_settings, finished  # noqa: E402  (scripts share their run bookkeeping)

#: The schemes, in the order of the tables (Press et al.'s Figure 1 has sinusoidal, rotary, T5 bias, ALiBi).
SCHEMES = ("absolute", "sinusoidal", "rope", "t5", "alibi", "tisa", "none")
#: What each is called in tables and figures.
LABELS = {"absolute": "absolute (learned table)", "sinusoidal": "sinusoidal", "rope": "RoPE", "t5": "T5 bias",
          "alibi": "ALiBi", "tisa": "TISA (S = 3)", "none": "none (NoPE)"}
HELD_OUT_EVERY = 10  # every tenth document of the packaged corpus is held out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--phase", default="all", choices=("all", "tabulate"), help="run the experiment, or only tabulate (default: all)")
    p.add_argument("--shard", default="0/1", help="K/N: run every N-th run from the K-th (default: 0/1)")
    p.add_argument("--out", type=Path, default=Path("runs/train-short-test-long"), help="run folders and the corpus split")
    p.add_argument("--results", type=Path, default=Path("reports/train-short-test-long"), help="folder of the results")
    p.add_argument("--keep-runs", action="store_true", help="keep each run's checkpoints once its results are written")
    p.add_argument("--schemes", nargs="+", default=list(SCHEMES), choices=SCHEMES, help="only these schemes (default: all)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="training seeds (default: 0 1 2)")
    p.add_argument("--size", default="tiny", choices=("tiny", "small", "base"), help="model size (default: tiny)")
    p.add_argument("--steps", type=int, default=600, help="training steps of every run (default: 600)")
    p.add_argument("--eval-every", type=int, default=200, help="held-out evaluation and checkpoint interval (default: 200)")
    p.add_argument("--seq-len", type=int, default=64, help="training length L (default: 64)")
    p.add_argument("--batch-size", type=int, default=16, help="blocks per step (default: 16)")
    p.add_argument("--lr", type=float, default=None, help="peak learning rate (default: posviz train's for the size)")
    p.add_argument("--vocab-size", type=int, default=4000, help="vocabulary of the trained tokenizer (default: 4000)")
    p.add_argument("--tisa-kernels", type=int, default=3, help="TISA kernels S (default: 3)")
    p.add_argument("--factors", default="0.5,1,1.25,1.5,2,3,4,8", help="evaluation lengths as multiples of L (default: %(default)s)")
    p.add_argument("--eval-blocks", type=int, default=48, help="text budget: this many windows of the longest length (default: 48)")
    args = p.parse_args(argv)
    k, n = (int(x) for x in args.shard.split("/"))
    if not 0 <= k < n:
        p.error(f"--shard {args.shard}: K must be in 0..N-1")
    args.shard_k, args.shard_n = k, n
    args.lengths = sorted({int(round(float(f) * args.seq_len)) for f in args.factors.split(",")})
    if any(n < 2 for n in args.lengths):
        p.error(f"--factors {args.factors}: every length must be at least 2 tokens")
    return args


#: What defines the experiment (recorded in ``RESULTS/experiment.json``; the run selection is not part of it).
SETTINGS = ("seeds", "size", "steps", "eval_every", "seq_len", "batch_size", "lr", "vocab_size", "tisa_kernels",
            "lengths", "eval_blocks")


def split_corpus(out: Path) -> dict[str, Any]:
    """Write ``OUT/corpus/train.txt`` and ``heldout.txt`` from the packaged corpus; their identities.

    Documents are joined by blank lines, which is how posviz reads a text file back (one document per paragraph);
    the identities are of the texts as read back, so they are what the runs and the scores really used.
    """
    from posviz.train.corpus import DEMO_CORPUS, corpus_identity, load_corpus
    from posviz.util.atomic import write_text_atomic

    docs = load_corpus([DEMO_CORPUS])
    folder = out / "corpus"
    folder.mkdir(parents=True, exist_ok=True)
    parts = {"train": [d for i, d in enumerate(docs) if i % HELD_OUT_EVERY != HELD_OUT_EVERY - 1],
             "heldout": [d for i, d in enumerate(docs) if i % HELD_OUT_EVERY == HELD_OUT_EVERY - 1]}
    identity: dict[str, Any] = {"source_corpus": DEMO_CORPUS, **{f"source_{k}": v for k, v in corpus_identity(docs).items()},
                                "held_out_rule": f"every {HELD_OUT_EVERY}th document (index % {HELD_OUT_EVERY} == {HELD_OUT_EVERY - 1})"}
    for name, texts in parts.items():
        path = folder / f"{name}.txt"
        body = "\n\n".join(texts) + "\n"
        if not path.is_file() or path.read_text(encoding="utf-8") != body:
            write_text_atomic(path, body)
        identity.update({f"{name}_{k}": v for k, v in corpus_identity(load_corpus([str(path)])).items()})
    return identity


def settings(args: argparse.Namespace, identity: dict[str, Any]) -> dict[str, Any]:
    """The experiment's settings, in the form :func:`albert_v1_v2.check_settings` records."""
    return {**{k: getattr(args, k) for k in SETTINGS}, **identity, "objective": "causal", "schemes": list(SCHEMES),
            "corpus_sha256": identity["train_corpus_sha256"], "variants": [{"name": "all", "steps": args.steps}]}


def run_name(scheme: str, seed: int) -> str:
    return f"{scheme}-s{seed}"


def train_one(args: argparse.Namespace, scheme: str, seed: int) -> Path:
    """Train (or resume, or skip when finished) one causal run; its folder."""
    from posviz.train import TrainOptions, train

    run = args.out / run_name(scheme, seed)
    if finished(run, args.steps):
        return run
    resume = (run / "run.json").is_file()
    options = TrainOptions(
        scheme=scheme, corpus=[str(args.out / "corpus" / "train.txt")], out=run, size=args.size, steps=args.steps,
        seq_len=args.seq_len, seed=seed, batch_size=args.batch_size, learning_rate=args.lr, eval_every=args.eval_every,
        vocab_size=args.vocab_size, tisa_kernels=args.tisa_kernels, objective="causal", precision="fp32",
    )
    _say(f"{run.name}: {'resuming' if resume else 'training'}")
    result = train(options, resume=resume)
    _say(f"{run.name}: {result.steps_run} steps in {result.seconds:.0f} s")
    return run


def evaluate_one(args: argparse.Namespace, run: Path) -> dict[str, Any]:
    """``posviz.extrapolate`` of the run's last checkpoint on the held-out text at every length, with the run's log."""
    import posviz
    from posviz.train.log import load_run_log

    result = posviz.extrapolate(str(run), corpus=str(args.out / "corpus" / "heldout.txt"), lengths=args.lengths,
                                max_blocks=args.eval_blocks, batch_size=4)
    log = load_run_log(run)
    last = log["evaluations"][-1]
    return {"run": run.name, "settings": json.loads((run / "run.json").read_text(encoding="utf-8")),
            "final_step": last["step"], "train_loss": last.get("train_loss"), "eval_loss": last.get("eval_loss"),
            "extrapolate": result.records()}


def run_experiment(args: argparse.Namespace) -> None:
    """Train, evaluate and keep the results of this shard's runs that have none yet, tabulating after each."""
    from posviz.util.atomic import write_text_atomic

    identity = split_corpus(args.out)
    started = any(args.out.glob("*/run.json")) or any((args.results / "runs").glob("*.json"))
    check_settings(args.results, settings(args, identity), started=started)
    everything = [(scheme, seed) for seed in args.seeds for scheme in SCHEMES if scheme in args.schemes]
    for i, (scheme, seed) in enumerate(everything):  # seed-major: every scheme's seed 0 first
        if i % args.shard_n != args.shard_k:
            continue
        target = args.results / "runs" / f"{run_name(scheme, seed)}.json"
        if target.is_file():
            _say(f"{target.stem}: results kept, skipped")
            continue
        run = train_one(args, scheme, seed)
        record = evaluate_one(args, run)
        target.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(target, json.dumps(record, indent=1) + "\n")
        if not args.keep_runs:
            shutil.rmtree(run)
        _say(f"{run.name}: results in {target}")
        tabulate(args)


# --- tables and figures ------------------------------------------------------------------------------------------


def load_runs(results: Path) -> list[dict[str, Any]]:
    """Every run's results in ``RESULTS/runs``, refusing a mix made from other text."""
    runs = [json.loads(p.read_text(encoding="utf-8")) for p in sorted((results / "runs").glob("*.json"))]
    hashes = {r["extrapolate"][0]["corpus_sha256"] for r in runs if r["extrapolate"]}
    if len(hashes) > 1:
        raise SystemExit(f"error: the runs in {results / 'runs'} were scored on different texts ({', '.join(sorted(hashes))})")
    return runs


def _mean_sd(values: list[float]) -> tuple[float, float]:
    m = sum(values) / len(values)
    sd = math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 0.0
    return m, sd


def summary_rows(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (scheme, length): loss over seeds, and the heads' mean attention entropy and sink mass."""
    by: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in runs:
        scheme = r["settings"]["options"]["scheme"] if "options" in r["settings"] else r["settings"]["scheme"]
        for rec in r["extrapolate"]:
            by.setdefault((scheme, rec["length"]), []).append(rec)
    rows = []
    for (scheme, length), recs in sorted(by.items(), key=lambda kv: (SCHEMES.index(kv[0][0]), kv[0][1])):
        losses = [x["loss"] for x in recs if x["loss"] is not None]
        row: dict[str, Any] = {"scheme": scheme, "length": length, "seeds": len(losses),
                               "training_length": recs[0].get("training_length")}
        if losses:
            row["loss_mean"], row["loss_sd"] = _mean_sd(losses)
            row["perplexity_mean"] = math.exp(row["loss_mean"])
            heads = [h for x in recs if x["loss"] is not None for h in x["heads"]]
            row["entropy_normalised_mean"] = _mean_sd([h["entropy_normalised"] for h in heads])[0]
            row["sink_mass_mean"] = _mean_sd([h["sink_mass"] for h in heads])[0]
        else:
            row["reason"] = recs[0].get("reason")
        rows.append(row)
    return rows


def entropy_by_layer(runs: list[dict[str, Any]]) -> dict[str, dict[int, dict[int, float]]]:
    """scheme -> layer -> length -> mean normalised entropy over heads and seeds."""
    acc: dict[str, dict[int, dict[int, list[float]]]] = {}
    for r in runs:
        scheme = r["settings"]["options"]["scheme"] if "options" in r["settings"] else r["settings"]["scheme"]
        for rec in r["extrapolate"]:
            for h in rec["heads"]:
                acc.setdefault(scheme, {}).setdefault(h["layer"], {}).setdefault(rec["length"], []).append(h["entropy_normalised"])
    return {s: {layer: {n: sum(v) / len(v) for n, v in sorted(d.items())} for layer, d in sorted(layers.items())}
            for s, layers in acc.items()}


def markdown_table(rows: list[dict[str, Any]], lengths: list[int], train_length: int) -> str:
    """Loss (mean ± sd over seeds) per scheme and length; n/a where the model cannot take the length."""
    head = "| scheme | " + " | ".join(f"{n} ({n / train_length:g}L)" for n in lengths) + " | loss(8L) − loss(L) |"
    lines = [head, "|" + " --- |" * (len(lengths) + 2)]
    for scheme in SCHEMES:
        cells, at = [], {}
        for n in lengths:
            row = next((r for r in rows if r["scheme"] == scheme and r["length"] == n), None)
            if row is None:
                cells.append("")
            elif "loss_mean" in row:
                at[n] = row["loss_mean"]
                cells.append(f"{row['loss_mean']:.3f} ± {row['loss_sd']:.3f}")
            else:
                cells.append("n/a")
        if not any(cells):
            continue
        longest = max(lengths)
        delta = f"{at[longest] - at[train_length]:+.3f}" if longest in at and train_length in at else "n/a"
        lines.append(f"| {LABELS[scheme]} | " + " | ".join(cells) + f" | {delta} |")
    return "\n".join(lines) + "\n"


def figure(rows: list[dict[str, Any]], entropy: dict[str, dict[int, dict[int, float]]], train_length: int, path: Path) -> None:
    """Left: held-out loss against length (mean ± sd over seeds). Right: entropy per layer against length."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    schemes = [s for s in SCHEMES if any(r["scheme"] == s for r in rows)]
    lengths = sorted({r["length"] for r in rows})
    fig = plt.figure(figsize=(13, 6.5), constrained_layout=True)
    grid = fig.add_gridspec(2, 1 + (len(schemes) + 1) // 2, width_ratios=[2.2] + [1] * ((len(schemes) + 1) // 2))
    ax = fig.add_subplot(grid[:, 0])
    colours = plt.get_cmap("tab10")
    for i, s in enumerate(schemes):
        pts = [r for r in rows if r["scheme"] == s and "loss_mean" in r]
        if pts:
            x = [r["length"] for r in pts]
            ax.errorbar(x, [r["loss_mean"] for r in pts], yerr=[r["loss_sd"] for r in pts], marker="o", ms=4, capsize=3,
                        color=colours(i), label=LABELS[s])
    ax.axvline(train_length, color="0.3", ls="--", lw=1)
    ax.text(train_length, ax.get_ylim()[0], f" trained at L = {train_length}", va="bottom", fontsize=8, color="0.3")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("evaluation length (tokens per window)")
    ax.set_ylabel("held-out loss (nats per token, lower is better)")
    ax.set_title("Loss against length (mean ± sd over seeds)")
    ax.legend(fontsize=8, loc="upper left")
    for i, s in enumerate(schemes):
        sub = fig.add_subplot(grid[i % 2, 1 + i // 2])
        layers = entropy.get(s, {})
        cmap = plt.get_cmap("viridis")
        for j, (layer, by_len) in enumerate(layers.items()):
            sub.plot(list(by_len), list(by_len.values()), marker=".", color=cmap(j / max(1, len(layers) - 1)), label=f"layer {layer}")
        sub.axvline(train_length, color="0.3", ls="--", lw=1)
        sub.set_xscale("log", base=2)
        sub.set_xlim(min(lengths) / 1.3, max(lengths) * 1.3)  # one x-range: a table that stops at L shows where it stops
        sub.set_ylim(0, 1)
        sub.set_title(LABELS[s], fontsize=9)
        sub.tick_params(labelsize=7)
        if i == 0:
            sub.set_ylabel("attention entropy / log(keys seen)", fontsize=8)
            sub.legend(fontsize=6)
    fig.suptitle("Train short, test long in miniature: causal LMs trained at L tokens, scored on held-out text up to 8L")
    tmp = path.with_name(path.stem + ".tmp" + path.suffix)
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)


def tabulate(args: argparse.Namespace) -> list[Path]:
    """``table.md``/``.csv``/``.json`` and ``figure.png`` from every run in ``RESULTS/runs``."""
    from posviz.util.atomic import write_text_atomic
    from posviz.util.tables import to_csv

    runs = load_runs(args.results)
    if not runs:
        return []
    rows = summary_rows(runs)
    lengths = sorted({r["length"] for r in rows})
    out = args.results
    write_text_atomic(out / "table.md", markdown_table(rows, lengths, args.seq_len))
    write_text_atomic(out / "table.csv", to_csv(rows))
    write_text_atomic(out / "table.json", json.dumps(rows, indent=1) + "\n")
    figure(rows, entropy_by_layer(runs), args.seq_len, out / "figure.png")
    return [out / "table.md", out / "table.csv", out / "table.json", out / "figure.png"]


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    from posviz.errors import PosvizError

    args = parse_args(argv)
    try:
        if args.phase == "all":
            run_experiment(args)
        for path in tabulate(args):
            _say(f"wrote {path}")
    except PosvizError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
