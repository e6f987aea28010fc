"""The fused Triton kernel without a GPU, run by tests/unit/test_tiled_fused.py in processes of their own.

* ``python tests/fused_kernel_runs.py interpret OUT.npz``, with ``TRITON_INTERPRET=1`` (set before Triton is
  imported, as the interpreter needs): the fused kernel and the PyTorch tiles on the same seeded inputs, every
  case's sums from both saved to one ``.npz``;
* ``python tests/fused_kernel_runs.py compile``: the kernel compiled to PTX for an sm_90 GPU (an H100/H200) in two
  configurations that between them take every branch; prints one JSON line per configuration. What Triton's
  interpreter accepts, its compiler may not: this is the check that it does.
"""

from __future__ import annotations

import inspect
import json
import os
import sys

import numpy as np
import torch

from posviz.observe.tiled.choice import choose_kernel
from posviz.observe.tiled.fused import accumulate_fused
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


def interpret(out: str) -> None:
    assert os.environ.get("TRITON_INTERPRET") == "1", "run with TRITON_INTERPRET=1"
    saved = {}
    for name, (n, causal, window, cap, batch, heads, kv, d, map_size, dtype, calls) in CASES.items():
        torch_sums = fused_sums = None
        for call in range(calls):
            x = inputs(n, causal, window, cap, batch, heads, kv, d, dtype, seed=n + call)
            assert choose_kernel(x) == "triton" and choose_kernel(x, "torch") == "torch"
            torch_sums = _torch(x, torch_sums, map_size)
            fused_sums = accumulate_fused(x, fused_sums, map_size=map_size, block=16)
        for side, sums in (("torch", torch_sums), ("fused", fused_sums)):
            for field, value in sums.numpy().items():
                saved[f"{name}/{side}/{field}"] = np.asarray(value)
    np.savez(out, **saved)


def assert_same_sums(kernel, tiles, support) -> None:
    """A kernel's sums (fused or compiled) against the PyTorch tiles' on the same inputs, and the statistics of both.

    Float32 logits, as in the model's own attention: each path is within about 3e-6 of a float64 softmax, so the two
    agree to the 1e-5 that the tiles promise against eager maps. The spans are counts of queries: the same total,
    and a query within 1e-7 of a threshold may move.
    """
    from posviz.observe.tiled.statistics import layer_statistics

    assert kernel.blocks == tiles.blocks
    for field in ("offsets", "row_mass", "row_sq", "row_sum_sq", "entropy", "max_weight", "received", "sink", "map"):
        np.testing.assert_allclose(getattr(kernel, field).numpy(), getattr(tiles, field).numpy(), rtol=1e-5, atol=1e-5,
                                   err_msg=field)
    for field in ("span50", "span90"):
        a, b = getattr(kernel, field).numpy(), getattr(tiles, field).numpy()
        assert a.sum() == b.sum() == tiles.blocks * (support.n - 1) * a.shape[0] and np.abs(a - b).sum() <= 4, field
    s, t = layer_statistics(kernel, support), layer_statistics(tiles, support)
    for stat in ("toeplitzness", "positional_share", "sink_mass", "entropy", "entropy_normalised", "max_weight", "received",
                 "distance_mass"):
        np.testing.assert_allclose(getattr(s, stat), getattr(t, stat), rtol=1e-5, atol=1e-6, err_msg=stat)


def _torch(x, sums, map_size):
    os.environ["POSVIZ_TILED_KERNEL"] = "torch"  # accumulate would take the fused kernel under the interpreter
    try:
        return accumulate(x, sums, map_size=map_size, tile=32)
    finally:
        del os.environ["POSVIZ_TILED_KERNEL"]


#: constexprs of the two compiled configurations: a causal RoPE model with a pooled map; a windowed, capped one with
#: an exact map and a head width that is not a power of two
COMPILED = {
    "causal-pooled": dict(BM=64, BN=64, D=64, DH=64, NBP=128, CAUSAL=True, HAS_WINDOW=False, HAS_CAP=False, EXACT_MAP=False),
    "window-capped-exact": dict(BM=64, BN=64, D=128, DH=80, NBP=128, CAUSAL=False, HAS_WINDOW=True, HAS_CAP=True, EXACT_MAP=True),
}


def compile_for_gpu() -> None:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, compile

    from posviz.observe.tiled.fused_kernel import statistics

    names = list(inspect.signature(statistics.fn).parameters)
    pointers = {"q_ptr": "*fp32", "k_ptr": "*fp32", "edges_ptr": "*i64", "bin_ptr": "*i32"}
    for name, constants in COMPILED.items():
        signature = {a: "constexpr" if a in constants else pointers.get(a, "*fp64" if a.endswith("_ptr") else
                                                                        "fp32" if a in ("scale", "softcap") else "i32")
                     for a in names}
        source = ASTSource(fn=statistics, signature=signature, constexprs={(names.index(k),): v for k, v in constants.items()})
        kernel = compile(source, target=GPUTarget("cuda", 90, 32))
        print(json.dumps({"name": name, "ptx_chars": len(kernel.asm["ptx"]), "shared": kernel.metadata.shared}), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "interpret":
        interpret(sys.argv[2])
    else:
        compile_for_gpu()
