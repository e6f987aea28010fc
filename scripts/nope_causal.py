"""Does a causal language model without positional encodings recover position after layer 0? (Haviv et al., 2022)

Trains tiny GPT-2 language models (4 layers x 128, 4 heads) on the demo corpus, briefly, with their position table
set to zero and frozen (NoPE: the causal mask is their only source of order), and one control per seed with learned
positions; then measures every layer with ``posviz.hidden`` on held-out blocks (the last fifth of the corpus's
blocks, never trained on). The blocks are cut with a posviz WordPiece tokenizer, so ``[CLS]`` opens and ``[SEP]``
closes every block; both positions are left out.

Usage (from the repository root)::

    .venv/bin/python scripts/nope_causal.py --out reports/hidden-known-facts --seeds 0,1,2
    # quick check: --steps 5 --seeds 0

Writes ``OUT/nope-causal.csv``: one row per (scheme, seed, layer) with the fields of ``posviz hidden --format json``
and the model's final training loss.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def train_one(out: Path, blocks, vocab: int, *, nope: bool, seed: int, steps: int, seq_len: int, batch: int = 16,
              lr: float = 1e-3) -> float:
    """Train one tiny GPT-2 on ``blocks`` (token ids) and save it to ``out``; returns the mean loss of the last 20 steps."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    config = GPT2Config(n_embd=128, n_layer=4, n_head=4, n_positions=seq_len, vocab_size=vocab, bos_token_id=0,
                        eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(config)
    if nope:
        with torch.no_grad():
            model.transformer.wpe.weight.zero_()
        model.transformer.wpe.weight.requires_grad_(False)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / max(1, steps // 10)))
    gen = torch.Generator().manual_seed(seed)
    ids = torch.as_tensor(blocks)
    losses = []
    model.train()
    for _ in range(steps):
        batch_ids = ids[torch.randint(len(ids), (batch,), generator=gen)]
        loss = model(input_ids=batch_ids, labels=batch_ids).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
    model.save_pretrained(out)
    return sum(losses[-20:]) / len(losses[-20:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", default=None, help="Corpus spec (default: the demo corpus).")
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--out", type=Path, default=Path("reports/hidden-known-facts"))
    args = parser.parse_args()

    import numpy as np
    import torch

    from posviz.observe.corpus_blocks import make_token_blocks
    from posviz.observe.hidden import hidden
    from posviz.train.corpus import DEMO_CORPUS, load_corpus
    from posviz.train.tokenizer import train_tokenizer
    from posviz.util.tables import emit, to_csv

    torch.set_num_threads(1)
    seeds = [int(s) for s in args.seeds.split(",")]
    texts = load_corpus([args.corpus or DEMO_CORPUS])
    tok = train_tokenizer(texts, vocab_size=8000, model_max_length=args.seq_len)
    blocks = make_token_blocks(tok, texts, args.seq_len)
    cut = len(blocks.ids) * 4 // 5
    train, held_out = blocks.ids[:cut], blocks.ids[cut:][:256]
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for seed in seeds:
        for scheme, nope in (("nope", True), ("learned", False)):
            folder = args.out / "models" / f"gpt2-{scheme}-s{seed}"
            loss = train_one(folder, train, len(tok), nope=nope, seed=seed, steps=args.steps, seq_len=args.seq_len)
            r = hidden(str(folder), token_blocks=held_out, block_layout=blocks.layout,
                       special_positions=blocks.special_positions, seed=seed)
            for rec in r.records():
                rows.append({"scheme": scheme, "seed": seed, "train_loss": loss, **rec, "model": folder.name})
            print(f"{scheme} seed {seed}: loss {loss:.3f}; probe MAE by layer "
                  + " ".join(f"{x['probe_mae']:.1f}" for x in r.records()) + f" (middle {r.records()[0]['probe_mae_baseline']:.1f})",
                  file=sys.stderr)
    emit(to_csv(rows), args.out / "nope-causal.csv")
    print(f"wrote {args.out / 'nope-causal.csv'} ({len(rows)} rows, {len(np.unique([r['model'] for r in rows]))} models)",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
