"""The tiled attention statistics as one fused Triton kernel per layer (GPU), for attention without an additive term.

:func:`~posviz.observe.tiled.kernel.accumulate` composes some twenty PyTorch operations per tile, each a trip
through memory over a ``heads x tile x tile`` block; a fused SDPA forward makes one. Here each program of
the kernel owns ``BM`` queries of one head and keeps a ``BM x BN`` tile in registers from its logits to every
sum that needs it, as flash attention does for its output:

1. over the key tiles that the support reaches, the online softmax gives each query's log-normaliser and its
   largest logit;
2. over the same tiles again, the exact weights ``a_ij = exp(s_ij - lse_i)`` go into the row sums (mass,
   squares, entropy), the column sums (attention received; the sink), the diagonal sums (the offset profile:
   the tile is skewed in registers with ``tl.gather`` so that each column is one offset), the block-averaged
   map (two one-hot products), and each query's histogram of mass by distance bin (its spans, once its row is
   complete).

Sums shared between programs (columns, diagonals, map cells, span counts) are float64 atomic adds, so the last
bits of a sum may differ between runs; per-query sums are float64 in registers. Tiles are float32, as in the
PyTorch path, and the results agree with it to float32 rounding (tests/unit/test_tiled_fused.py runs this kernel
in Triton's interpreter on the CPU).

Supported: every support (causal, sliding window, full) and a logit cap, with no additive term (RoPE and learned
absolute positions: the long-context models). ALiBi, T5 buckets, TISA and TUPE take the PyTorch path.
"""

from __future__ import annotations

import contextlib
import functools
import os
from typing import Any

from posviz.observe.tiled.sums import MAP_SIZE, TiledSums, distance_bins

#: Queries and keys per program tile (a power of two, at least 16: ``tl.dot``'s smallest side).
BLOCK = 64
#: ``tl.gather``, with which the tile is skewed, came with Triton 3.3.
MIN_TRITON = (3, 3)


@functools.lru_cache(maxsize=1)
def triton_version() -> tuple[int, int] | None:
    """Triton's (major, minor), or None where it is not installed."""
    try:
        import triton
    except ImportError:
        return None
    major, minor = (int("".join(c for c in part if c.isdigit()) or 0) for part in triton.__version__.split(".")[:2])
    return major, minor


def why_not_fused(inputs: Any) -> str | None:
    """Why ``inputs`` cannot take the fused kernel (None: it can)."""
    if inputs.bias is not None:
        return "its attention adds a positional term"
    if inputs.query.device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        return f"its tensors are on {inputs.query.device.type}, not a CUDA device"
    version = triton_version()
    if version is None:
        return "Triton is not installed"
    if version < MIN_TRITON:
        return f"Triton {version[0]}.{version[1]} is older than {MIN_TRITON[0]}.{MIN_TRITON[1]}"
    return None


def accumulate_fused(inputs: Any, sums: TiledSums | None = None, *, map_size: int = MAP_SIZE, block: int = BLOCK) -> TiledSums:
    """Add every block of ``inputs`` to ``sums`` with the fused kernel (new sums when None); returns the sums.

    Parameters
    ----------
    inputs
        One layer's queries, keys and support; no additive term.
    sums
        The layer's sums so far.
    map_size
        Side of the block-averaged map when new sums are made.
    block
        Queries and keys per program tile: a power of two, at least 16.
    """
    import torch
    import triton

    from posviz.observe.tiled.fused_kernel import statistics

    if block < 16 or block & (block - 1):
        raise ValueError(f"the fused kernel's block is a power of two of at least 16, got {block}")
    if inputs.bias is not None:
        raise ValueError("the fused kernel takes no additive positional term")
    q, k = inputs.query, inputs.key
    batch, heads, n, d = q.shape
    device = q.device
    if sums is None:
        sums = TiledSums.zeros(heads, n, map_size, device)
    edges, bin_of = (torch.as_tensor(x, device=device) for x in distance_bins(n))
    bin_of = bin_of.to(torch.int32)
    bins = len(edges) - 1
    support = inputs.support
    # Triton launches on the current CUDA device: with a model spread over GPUs (device_map), the layer's own
    on_device = torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()
    with torch.no_grad(), on_device:
        statistics[(triton.cdiv(n, block), heads)](
            q, k, *q.stride(), *k.stride(), batch, n, heads // k.shape[1], float(inputs.scale),
            float(inputs.softcap or 1.0), support.window or 0,
            sums.offsets, sums.row_mass, sums.row_sq, sums.row_sum_sq, sums.entropy, sums.max_weight, sums.received,
            sums.sink, sums.span50, sums.span90, sums.map, int(sums.map.shape[-1]), edges, bin_of, bins,
            BM=block, BN=block, D=max(16, triton.next_power_of_2(d)), DH=d, NBP=triton.next_power_of_2(bins),
            CAUSAL=support.causal, HAS_WINDOW=support.window is not None, HAS_CAP=inputs.softcap is not None,
            EXACT_MAP=sums.exact_map)
    sums.blocks += batch
    return sums
