"""Benchmark 5: training step time of each posviz scheme against HF ``AlbertForMaskedLM``.

Same size, vocabulary, sequence length and batch for every model; one step is
forward + masked-LM loss + backward + AdamW update on a random batch with 15% of
positions labelled. Models run in alternating order (rotated every round) so that
drifts in machine load hit all of them alike; each round times several steps
after a warm-up, and the table reports the median per-step time over rounds,
the min–max, and ratios to HF ALBERT and to our ``absolute`` scheme.

Targets (issue "Performance"): absolute ≤ 1.1× HF; TISA (tisa, absolute+tisa)
≤ 1.15× absolute; TUPE (tupe-a, tupe-r) ≤ 1.3× absolute.

Usage::

    .venv/bin/python benchmarks/bench_train_step.py --size small --seq-len 128 --batch-size 8
    .venv/bin/python benchmarks/bench_train_step.py --device cuda --size base --seq-len 512 --precision bf16
"""

from __future__ import annotations

import statistics
from functools import partial

import torch
from harness import autocast, step_parser, step_times, write_step_results

SCHEMES = ("absolute", "tisa", "absolute+tisa", "tupe-a", "tupe-r")
TARGETS = {"absolute": ("HF", 1.10), "tisa": ("absolute", 1.15), "absolute+tisa": ("absolute", 1.15),
           "tupe-a": ("absolute", 1.30), "tupe-r": ("absolute", 1.30)}


def build(name: str, args):
    from transformers import AlbertConfig, AlbertForMaskedLM

    from posviz.models import SIZES, PosvizAlbertConfig, PosvizForMaskedLM

    common = dict(vocab_size=args.vocab_size, max_position_embeddings=args.seq_len, **SIZES[args.size])
    torch.manual_seed(0)
    if name == "HF":
        model = AlbertForMaskedLM(AlbertConfig(**common, hidden_act="gelu_new", attn_implementation="sdpa"))
    else:
        model = PosvizForMaskedLM(PosvizAlbertConfig(**common, position_scheme=name))
    model = model.to(args.device).train()
    return model, torch.optim.AdamW(model.parameters(), lr=1e-4)


def make_batch(args):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, args.vocab_size, (args.batch_size, args.seq_len), generator=g)
    labels = torch.where(torch.rand(ids.shape, generator=g) < 0.15, ids, torch.full_like(ids, -100))
    return ids.to(args.device), labels.to(args.device)


def step(model, opt, ids, labels, args) -> None:
    with autocast(args.device, args.precision):
        loss = model(input_ids=ids, labels=labels).loss
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


def main() -> None:
    args = step_parser(__doc__.splitlines()[0], batch_size=8, steps=4, schemes=SCHEMES).parse_args()
    names = ["HF", *args.schemes]
    models = {n: build(n, args) for n in names}
    ids, labels = make_batch(args)
    times = step_times(args, {n: partial(step, *models[n], ids, labels, args) for n in names})
    med = {n: statistics.median(v) for n, v in times.items()}
    print("| model | median ms/step | min–max | × HF | × absolute | target | met |")
    print("|---|---|---|---|---|---|---|")
    rows = []
    for n in names:
        ratio_hf = med[n] / med["HF"]
        ratio_abs = med[n] / med["absolute"] if "absolute" in med else float("nan")
        target = TARGETS.get(n)
        met = ""
        if target:
            ref, limit = target
            ratio = ratio_hf if ref == "HF" else ratio_abs
            met = "yes" if ratio <= limit else "no"
        tgt = f"≤ {target[1]}× {target[0]}" if target else "—"
        print(f"| {n} | {med[n] * 1e3:.1f} | {min(times[n]) * 1e3:.1f}–{max(times[n]) * 1e3:.1f} | {ratio_hf:.3f} | {ratio_abs:.3f} | {tgt} | {met} |")
        rows.append({"model": n, "median_s": med[n], "min_s": min(times[n]), "max_s": max(times[n]), "x_hf": ratio_hf, "x_absolute": ratio_abs, "met": met})
    write_step_results(args, rows)


if __name__ == "__main__":
    main()
