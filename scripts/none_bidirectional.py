"""A bidirectional model without positions cannot know position: ``posviz hidden`` on ``posviz train --scheme none`` runs.

Every layer of such a model is a permutation-equivariant function of its block, so the positional share must sit at
its null, the position probe at always predicting the middle and the order probe at chance, at every layer. Trains
one tiny ``none`` run per seed on the packaged demo corpus, then measures it with ``posviz hidden`` on 256 blocks.

Usage (from the repository root)::

    .venv/bin/python scripts/none_bidirectional.py --out runs/none-bidirectional --results reports/hidden-known-facts
    # quick check: --steps 5 --seeds 0

Writes ``RESULTS/none-bidirectional.csv``: one row per (seed, layer) with the fields of ``posviz hidden --format json``.
Finished runs in ``--out`` are reused.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

LABEL = "none (bidirectional, posviz train)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/none-bidirectional"), help="folder of the runs")
    parser.add_argument("--results", type=Path, default=Path("reports/hidden-known-facts"), help="folder of the CSV")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--seeds", default="0,1,2")
    args = parser.parse_args()
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        print(f"error: --seeds must be integers separated by commas, not {args.seeds!r}", file=sys.stderr)
        return 2

    import torch

    from posviz.observe.hidden import hidden
    from posviz.train import TrainOptions, train
    from posviz.train.corpus import DEMO_CORPUS
    from posviz.train.log import load_run_log
    from posviz.util.tables import emit, to_csv

    torch.set_num_threads(1)
    rows = []
    for seed in seeds:
        out = args.out / f"none-s{seed}"
        try:
            done = load_run_log(out)["evaluations"][-1]["step"] == args.steps
        except Exception:  # noqa: BLE001 - no finished run there yet
            done = False
        if not done:
            train(TrainOptions(scheme="none", corpus=[DEMO_CORPUS], out=out, size="tiny", steps=args.steps,
                               seq_len=args.seq_len, seed=seed), resume=(out / "run.json").is_file())
        r = hidden(str(out), corpus=DEMO_CORPUS, seq_len=args.seq_len, max_blocks=256)  # as `posviz hidden RUN`: seed 0
        for rec in r.records():
            rows.append({"scheme": LABEL, "seed": seed, **rec})
        print(f"none seed {seed}: share by layer " + " ".join(f"{x['positional_share']:.4f}" for x in r.records()), file=sys.stderr)
    args.results.mkdir(parents=True, exist_ok=True)
    emit(to_csv(rows), args.results / "none-bidirectional.csv")
    print(f"wrote {args.results / 'none-bidirectional.csv'} ({len(rows)} rows)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
