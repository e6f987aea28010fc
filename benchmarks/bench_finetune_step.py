"""Benchmark 10: fine-tuning step time of ``PosvizForSequenceClassification`` against HF ``AlbertForSequenceClassification``.

Same size, vocabulary, sequence length and batch for every model; one step is
forward + classification loss + backward + AdamW update on a padded batch of
random token ids (lengths drawn between half and all of ``--seq-len``, the rest
padding, as fine-tuning batches are), two classes. Models run in rotating order
every round so that drifts in machine load hit all of them alike; the table
reports the median per-step time over rounds, the min–max, and the ratio to HF.

Targets (issue 19, "Speed"): absolute ≤ 1.1× HF ALBERT; TISA (tisa,
absolute+tisa) ≤ 1.15×; TUPE (tupe-a, tupe-r) ≤ 1.3×.

Usage::

    .venv/bin/python benchmarks/bench_finetune_step.py --size small --seq-len 128 --batch-size 16
    .venv/bin/python benchmarks/bench_finetune_step.py --device cuda --size base --seq-len 128 --batch-size 32 --precision bf16
"""

from __future__ import annotations

import statistics
from functools import partial

import torch
from harness import autocast, step_parser, step_times, write_step_results

SCHEMES = ("absolute", "tisa", "absolute+tisa", "tupe-a", "tupe-r")
TARGETS = {"absolute": 1.10, "tisa": 1.15, "absolute+tisa": 1.15, "tupe-a": 1.30, "tupe-r": 1.30}


def build(name: str, args):
    from transformers import AlbertConfig, AlbertForSequenceClassification

    from posviz.models import SIZES, PosvizAlbertConfig, PosvizForSequenceClassification

    common = dict(vocab_size=args.vocab_size, max_position_embeddings=args.seq_len, num_labels=2, **SIZES[args.size])
    torch.manual_seed(0)
    if name == "HF":
        model = AlbertForSequenceClassification(AlbertConfig(**common, hidden_act="gelu_new", classifier_dropout_prob=0.1,
                                                             attn_implementation="sdpa"))
    else:
        model = PosvizForSequenceClassification(PosvizAlbertConfig(**common, position_scheme=name, classifier_dropout_prob=0.1))
    model = model.to(args.device).train()
    return model, torch.optim.AdamW(model.parameters(), lr=2e-5)


def make_batch(args):
    """Random ids, right-padded to ``seq_len`` from lengths in [seq_len/2, seq_len], and binary labels."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, args.vocab_size, (args.batch_size, args.seq_len), generator=g)
    lengths = torch.randint(args.seq_len // 2, args.seq_len + 1, (args.batch_size,), generator=g)
    mask = (torch.arange(args.seq_len)[None] < lengths[:, None]).long()
    ids = ids * mask  # padding id 0
    labels = torch.randint(0, 2, (args.batch_size,), generator=g)
    return ids.to(args.device), mask.to(args.device), labels.to(args.device)


def step(model, opt, ids, mask, labels, args) -> None:
    with autocast(args.device, args.precision):
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


def main() -> None:
    args = step_parser(__doc__.splitlines()[0], batch_size=16, steps=3, schemes=SCHEMES).parse_args()
    names = ["HF", *args.schemes]
    models = {n: build(n, args) for n in names}
    batch = make_batch(args)
    times = step_times(args, {n: partial(step, *models[n], *batch, args) for n in names})
    med = {n: statistics.median(v) for n, v in times.items()}
    print("| model | median ms/step | min–max | × HF | target | met |")
    print("|---|---|---|---|---|---|")
    rows = []
    for n, v in times.items():
        ratio = med[n] / med["HF"]
        limit = TARGETS.get(n)
        met = "" if limit is None else "yes" if ratio <= limit else "no"
        target = f"≤ {limit}× HF" if limit else "—"
        print(f"| {n} | {med[n] * 1e3:.1f} | {min(v) * 1e3:.1f}–{max(v) * 1e3:.1f} | {ratio:.3f} | {target} | {met} |")
        rows.append({"model": n, "median_s": med[n], "min_s": min(v), "max_s": max(v), "x_hf": ratio, "met": met})
    write_step_results(args, rows)


if __name__ == "__main__":
    main()
