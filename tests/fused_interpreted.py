"""Run by tests/unit/test_tiled_fused.py in a process of its own with ``TRITON_INTERPRET=1`` (set before Triton is
imported, as the interpreter needs): the fused kernel and the PyTorch tiles on the same seeded inputs, every case's
sums from both saved to one ``.npz`` (``python tests/fused_interpreted.py OUT.npz``)."""

from __future__ import annotations

import os
import sys

import numpy as np
import torch

from posviz.observe.tiled.fused import accumulate_fused, use_fused
from posviz.observe.tiled.kernel import AttentionInputs, accumulate
from posviz.observe.tiled.support import Support

#: name: (n, causal, window, softcap, batch, heads, kv_heads, head_dim, map_size, dtype, calls)
CASES = {
    "causal-gqa-exact-map": (40, True, None, None, 2, 4, 2, 12, 512, torch.float32, 1),
    "bidirectional-pooled-map": (70, False, None, None, 2, 4, 4, 16, 16, torch.float32, 1),
    "window-softcap-bfloat16": (70, True, 9, 5.0, 1, 2, 1, 24, 512, torch.bfloat16, 1),
    "bidirectional-window-pooled-twice": (100, False, 30, None, 1, 2, 2, 8, 7, torch.float32, 2),
}


def inputs(n, causal, window, softcap, batch, heads, kv, d, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    q = (2 * torch.randn(batch, heads, n, d, generator=g)).to(dtype)
    k = (2 * torch.randn(batch, kv, n, d, generator=g)).to(dtype)
    return AttentionInputs(q, k, d**-0.5, Support(n, causal, window), softcap=softcap)


def main(out: str) -> None:
    assert os.environ.get("TRITON_INTERPRET") == "1", "run with TRITON_INTERPRET=1"
    saved = {}
    for name, (n, causal, window, cap, batch, heads, kv, d, map_size, dtype, calls) in CASES.items():
        torch_sums = fused_sums = None
        for call in range(calls):
            x = inputs(n, causal, window, cap, batch, heads, kv, d, dtype, seed=n + call)
            assert use_fused(x) and not use_fused(x, "torch")
            torch_sums = _torch(x, torch_sums, map_size)
            fused_sums = accumulate_fused(x, fused_sums, map_size=map_size, block=16)
        for side, sums in (("torch", torch_sums), ("fused", fused_sums)):
            for field, value in sums.numpy().items():
                saved[f"{name}/{side}/{field}"] = np.asarray(value)
    np.savez(out, **saved)


def _torch(x, sums, map_size):
    os.environ["POSVIZ_TILED_KERNEL"] = "torch"  # accumulate would take the fused kernel under the interpreter
    try:
        return accumulate(x, sums, map_size=map_size, tile=32)
    finally:
        del os.environ["POSVIZ_TILED_KERNEL"]


if __name__ == "__main__":
    main(sys.argv[1])
