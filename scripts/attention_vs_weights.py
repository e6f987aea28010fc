"""Data-based against weight-based Toeplitzness, per head: does a head that looks positional from its weights attend
positionally on text?

For every head of every layer of a model (default: the packaged all-MiniLM-L6-v2), two numbers over the same
positions 0 .. N-1:

* weight-based: the off-diagonal Toeplitzness of the head's position-only logits (E_P W_Q + b_Q)(E_P W_K + b_K)ᵀ
  after the embedding LayerNorm, as ``posviz heads MODEL --layers all --positions 0:N`` gives it, with its
  row-permutation null;
* data-based: the off-diagonal Toeplitzness of the head's mean attention over blocks of the packaged
  ``cpython-3.11.7-docstrings`` corpus, as ``posviz attention MODEL --seq-len N --layers all`` gives it, with its row-shuffle null, and the
  positional share.

Usage (from the repository root)::

    .venv/bin/python scripts/attention_vs_weights.py --out reports
    # quick check: --max-blocks 8 --seq-len 32

Writes ``OUT/attention-vs-weights-minilm.csv`` (one row per layer and head) and
``OUT/attention-vs-weights-minilm.png`` (the scatter, one colour per layer, with the Spearman correlation).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def weight_rows(model: str, positions: str) -> dict[tuple[int, int], dict]:
    """``posviz heads`` scores of every layer and head, keyed by ``(layer, head)``."""
    from posviz.extract.registry import open_heads
    from posviz.scoring.layers import LayerTable, scan_layers

    heads = open_heads(model, ln="ln", bias=True, positions=positions)
    table = LayerTable(heads.metadata())
    for scored in scan_layers(heads, range(heads.num_layers)):
        table.add(scored)
    return {(r["layer"], r["head"]): r for r in table.rows()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="sentence-transformers/all-MiniLM-L6-v2")
    parser.add_argument("--corpus", default="cpython-3.11.7-docstrings")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--max-blocks", type=int, default=256)
    parser.add_argument("--out", type=Path, default=Path("reports"))
    parser.add_argument("--name", default="attention-vs-weights-minilm")
    args = parser.parse_args()

    import numpy as np
    from scipy.stats import spearmanr

    from posviz.errors import PosvizError
    from posviz.observe.attention import attention
    from posviz.plots.common import new_figure, save_figure
    from posviz.util.paths import check_folder
    from posviz.util.tables import emit, to_csv

    try:  # bad input: one line, exit 2, before anything is written
        check_folder(args.out, "--out")
        weights = weight_rows(args.model, f"0:{args.seq_len}")
        result = attention(args.model, corpus=args.corpus, seq_len=args.seq_len, layers="all", max_blocks=args.max_blocks,
                           show_progress=True)
    except PosvizError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    rows = []
    for r in result.records():
        w = weights[(r["layer"], r["head"])]
        rows.append({
            "layer": r["layer"], "head": r["head"],
            "weight_toeplitzness_offdiag": w["toeplitzness_offdiag"], "weight_null_offdiag": w["null_mean_offdiag"],
            "weight_peak_offset": w["peak_offset"],
            "attention_toeplitzness_offdiag": r["toeplitzness_offdiag"], "attention_null_offdiag": r["null_mean_offdiag"],
            "attention_toeplitzness": r["toeplitzness"], "positional_share": r["positional_share"],
            "positional_share_null": r["positional_share_null"], "attention_peak_offset": r["profile_peak"],
            "sink_mass": r["sink_mass"], "blocks": r["blocks"], "seq_len": r["seq_len"],
        })
    args.out.mkdir(parents=True, exist_ok=True)
    emit(to_csv(rows), args.out / f"{args.name}.csv")

    x = np.array([r["weight_toeplitzness_offdiag"] for r in rows])
    y = np.array([r["attention_toeplitzness_offdiag"] for r in rows])
    share = np.array([r["positional_share"] for r in rows])
    layer = np.array([r["layer"] for r in rows])
    rho, p = spearmanr(x, y)
    rho_share, _ = spearmanr(x, share)
    fig = new_figure(9.5, 4.6)
    ax1, ax2 = fig.subplots(1, 2)
    for ax, values, label in ((ax1, y, "data-based: Toeplitzness of mean attention"), (ax2, share, "data-based: positional share")):
        sc = ax.scatter(x, values, c=layer, cmap="viridis", s=22, edgecolor="k", lw=0.3)
        ax.set_xlabel("weight-based: Toeplitzness of position-only logits", fontsize=8)
        ax.set_ylabel(label, fontsize=8)
        ax.tick_params(labelsize=7)
    ax1.axhline(float(np.mean([r["attention_null_offdiag"] for r in rows])), color="0.5", lw=0.8, ls="--", label="null (row shuffles), mean")
    ax1.legend(fontsize=7, frameon=False)
    fig.colorbar(sc, ax=[ax1, ax2], label="layer", shrink=0.8)
    fig.suptitle(f"{args.model}: {len(rows)} heads, off-diagonal R² over positions 0-{args.seq_len - 1}; "
                 f"{result.blocks} blocks of {result.corpus}\nSpearman ρ (weights vs mean attention) = {rho:.2f} (p = {p:.1g}); "
                 f"ρ (weights vs positional share) = {rho_share:.2f}", fontsize=8)
    save_figure(fig, args.out / f"{args.name}.png", dpi=150)
    print(f"spearman weights~attention {rho:.3f} (p={p:.2g}); weights~share {rho_share:.3f}; "
          f"wrote {args.out / args.name}.csv/.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
