"""Benchmark 12: ``posviz hidden`` against a plain Hugging Face forward with ``output_hidden_states=True``.

On the bundled all-MiniLM-L6-v2 (6 layers, hidden 384), over B blocks of 128 tokens of the demo corpus, run as
whole processes and alternately:

* ``posviz hidden MiniLM --seq-len 128 --max-blocks B --format json`` (every statistic of the 7 hidden states,
  probes included);
* the plain script a user would start from: load the same model and tokenizer, cut the same blocks, and run
  ``model(ids, output_hidden_states=True)`` over them in batches of 8, keeping nothing.

Then, in this process, the memory posviz adds while the model runs: the float64 sums it keeps (counted exactly from
their arrays) and the probe's sample, against the budget 2 x layers x n x d x 8 bytes plus the sample.

Targets (issue 28): at most 1.2x the plain forward's time at 256 blocks; the added memory within the budget.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from harness import alternate, markdown_table, posviz_cmd

MODEL = "sentence-transformers/all-MiniLM-L6-v2"

PLAIN_SCRIPT = r"""
import sys
import torch
from transformers import AutoModel, AutoTokenizer
from posviz.observe.corpus_blocks import make_token_blocks
from posviz.read.sources import packaged_model_path
from posviz.train.corpus import DEMO_CORPUS, load_corpus

blocks, device = int(sys.argv[1]), sys.argv[2]
folder = packaged_model_path("sentence-transformers/all-MiniLM-L6-v2")[0]
tok = AutoTokenizer.from_pretrained(folder)
model = AutoModel.from_pretrained(folder).to(device).eval()
ids = make_token_blocks(tok, load_corpus([DEMO_CORPUS]), 128, blocks).ids
with torch.inference_mode():
    for start in range(0, len(ids), 8):
        batch = torch.as_tensor(ids[start : start + 8]).to(device)
        out = model(input_ids=batch, attention_mask=torch.ones_like(batch), output_hidden_states=True)
        torch.cuda.synchronize() if device == "cuda" else None
"""


def added_memory(blocks: int) -> str:
    """The bytes of the sums and of the probe sample, from the arrays themselves, against the budget."""
    import numpy as np

    from posviz.observe.corpus_blocks import make_token_blocks
    from posviz.observe.hidden_sums import accumulate_hidden, probe_plan
    from posviz.observe.loading import load_model
    from posviz.train.corpus import DEMO_CORPUS, load_corpus

    loaded = load_model(MODEL)
    tb = make_token_blocks(loaded.tokenizer, load_corpus([DEMO_CORPUS]), 128, blocks)
    kept = np.array([i for i in range(128) if i not in tb.special_positions])
    layers = list(range(loaded.num_layers + 1))
    plan = probe_plan(len(tb.ids), kept, probe_blocks=64, probe_positions=32, seed=0)
    sums = accumulate_hidden(loaded.model, tb.ids, layers, kept, plan=plan)
    kept_bytes, sample = sums.nbytes
    d = int(sums.layer(0).total.shape[1])
    budget = 2 * len(layers) * 128 * d * 8
    return (f"sums kept: {kept_bytes / 2**20:.2f} MiB (budget 2 x {len(layers)} x 128 x {d} x 8 B = {budget / 2**20:.2f} MiB); "
            f"probe sample: {sample / 2**20:.2f} MiB ({len(sums.sample.blocks)} blocks x 32 positions x {len(layers)} layers, float32)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--blocks", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "plain.py"
        script.write_text(PLAIN_SCRIPT)
        commands = {
            "posviz hidden": posviz_cmd("hidden", MODEL, "--seq-len", "128", "--max-blocks", str(args.blocks),
                                        "--device", args.device, "--format", "json"),
            "plain HF forward, output_hidden_states=True": [sys.executable, str(script), str(args.blocks), args.device],
        }
        results = alternate(commands, args.repeats)
    rows = [m.row() for m in results.values()]
    posviz, plain = results["posviz hidden"], results["plain HF forward, output_hidden_states=True"]
    print(markdown_table(rows))
    print(f"\n{args.blocks} blocks of 128 tokens, MiniLM (7 hidden states x 384), device {args.device}: "
          f"time ratio {posviz.wall / plain.wall:.2f}x (target <= 1.2x); peak {posviz.peak:.0f} MiB "
          f"(plain {plain.peak:.0f} MiB, excess {posviz.peak - plain.peak:.0f} MiB); CPU time ratio "
          f"{posviz.cpu / plain.cpu:.2f}x (user + system, for the host's noise)")
    print(added_memory(args.blocks))


if __name__ == "__main__":
    main()
