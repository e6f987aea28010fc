"""Benchmark 14: ``posviz extrapolate`` at one length against a plain forward with ``output_attentions=True``.

In one process, on one random LLaMA-shaped causal LM (eager attention; default 6 layers, 8 heads, hidden 512,
vocabulary 8000) and the same B windows of n random tokens, timed alternately R times after one warm-up round:

* extrapolate's pass at that length (:func:`posviz.extrapolation.evaluate.run_length`): the forward pass with its
  logits, the next-token loss read from them, every layer's attention added to ``posviz attention``'s streaming sums
  and to the entropy and largest-weight sums, then every head's statistics (sink, positional share, Toeplitzness with
  its null);
* the plain loop a user would write: ``model(ids, output_attentions=True)`` over the same windows in the same
  batches, keeping nothing.

Loading the model and cutting the text are the same for both and left out. Target (issue 29): at most 1.3x.
"""

from __future__ import annotations

import argparse
import statistics
import time


def build(layers: int, heads: int, hidden: int, vocab: int, seed: int = 0):
    """A random LLaMA-shaped causal LM, eager attention, in eval mode."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(hidden_size=hidden, intermediate_size=4 * hidden, num_hidden_layers=layers, num_attention_heads=heads,
                      num_key_value_heads=heads, vocab_size=vocab, max_position_embeddings=4096, attn_implementation="eager")
    return LlamaForCausalLM(cfg).eval()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--length", type=int, default=512)
    ap.add_argument("--blocks", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()

    import numpy as np
    import torch

    from posviz.extrapolation.blocks import TextBudget, length_blocks
    from posviz.extrapolation.evaluate import run_length

    model = build(args.layers, args.heads, args.hidden, args.vocab).to(args.device)
    n = args.length
    tokens = np.random.default_rng(0).integers(1, args.vocab, size=args.blocks * (n - 1))
    budget = TextBudget(tokens=tokens, prefix=(0,), suffix=(), layout="BOS at 0", longest=n, blocks=args.blocks)
    blocks = length_blocks(budget, n, objective="causal")
    layers = list(range(args.layers))

    def sync() -> None:
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()

    def posviz() -> None:
        run_length(model, blocks, layers, objective="causal", batch_size=args.batch_size)
        sync()

    def plain() -> None:
        with torch.inference_mode():
            for start in range(0, len(blocks.inputs), args.batch_size):
                ids = torch.as_tensor(blocks.inputs[start : start + args.batch_size]).to(args.device)
                out = model(input_ids=ids, attention_mask=torch.ones_like(ids), output_attentions=True, use_cache=False)
                del out
        sync()

    times: dict[str, list[float]] = {"extrapolate": [], "plain": []}
    posviz(), plain()  # warm-up
    for _ in range(args.repeats):
        for name, fn in (("extrapolate", posviz), ("plain", plain)):
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    ours, theirs = statistics.median(times["extrapolate"]), statistics.median(times["plain"])
    print("| | median s | min s | max s |\n| --- | --- | --- | --- |")
    for name, values in times.items():
        print(f"| {name} | {statistics.median(values):.3f} | {min(values):.3f} | {max(values):.3f} |")
    print(f"\n{args.blocks} windows of {n} tokens, LLaMA-shaped {args.layers} layers x {args.heads} heads, hidden {args.hidden}, "
          f"batch {args.batch_size}, device {args.device}, torch threads {torch.get_num_threads()}: time ratio "
          f"{ours / theirs:.2f}x (target <= 1.3x)")


if __name__ == "__main__":
    main()
