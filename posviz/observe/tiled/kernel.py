"""Attention statistics in query x key tiles, from a layer's queries and keys: no ``n x n`` map is ever formed.

For each block and each tile of ``tile`` queries, two passes run over the key tiles that the support reaches
(causal and windowed supports skip the others):

1. the online softmax (running maximum and rescaled sum, as flash attention does) gives each query's
   log-normaliser ``lse_i = log sum_j exp(s_ij)`` and its largest logit;
2. the logits are formed again, ``a_ij = exp(s_ij - lse_i)`` is exact, and every sum of
   :class:`~posviz.observe.tiled.sums.TiledSums` takes the tile: diagonal sums (the offset profile and the
   positional share), row sums (entropy, largest weight, sums of squares), column sums (attention received
   by each key), each query's mass by distance (its span, once the query's row is complete) and the
   block-averaged map.

The logits are ``s_ij = cap(scale * q_i . k_j) + bias_ij`` (``cap(x) = c tanh(x / c)`` where the model caps
them), outside the support ``-inf``. Tiles are float32, the precision of the model's own attention (the
weights of a row are within about 1e-6 of a float64 softmax); every sum across tiles and blocks is float64.
Memory: a few ``heads x tile x tile`` float32 tiles, whatever ``n``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from posviz.observe.tiled.sums import MAP_SIZE, TiledSums, distance_bins
from posviz.observe.tiled.support import Support

#: Queries (and keys) per tile: 256 keeps a tile's float64 temporaries near 0.5 MB per head.
TILE = 256
#: On a GPU, blocks of a batch go through one tile together while blocks x heads x tile x tile stays under this many
#: entries (short blocks: one series of kernel launches for the whole batch instead of one per block). On a CPU one
#: block at a time was measured faster (about 10 % at 8 blocks x 12 heads x 128 positions).
TILE_ENTRIES = 2**22

#: ``bias(block, i0, i1, j0, j1)``: the additive term of queries ``i0:i1`` and keys ``j0:j1`` of one block,
#: broadcastable to ``(heads, i1 - i0, j1 - j0)``, or None.
Bias = Callable[[int, int, int, int, int], Any]


@dataclass(frozen=True)
class AttentionInputs:
    """What one layer's attention is computed from, for a batch of blocks, as the model formed it.

    Attributes
    ----------
    query
        ``(batch, heads, n, head_dim)``, position already applied (RoPE rotated).
    key
        ``(batch, kv_heads, n, head_dim)``; ``heads`` a multiple of ``kv_heads`` (grouped-query attention:
        head ``h`` reads key head ``h // (heads // kv_heads)``, as transformers' ``repeat_kv`` expands them).
    scale
        The factor of ``q . k`` (``1 / sqrt(head_dim)`` in most models, 1 in T5).
    support
        The keys each query may attend to.
    bias
        The additive position term (ALiBi, T5 buckets, TISA, TUPE), or None.
    softcap
        ``c`` of the logit cap ``c tanh(x / c)`` (Gemma 2), or None.
    lse
        ``(batch, heads, n)`` float32, each query's log-sum-exp as the model's own attention computed it
        (:mod:`~posviz.observe.tiled.normalisers`), or None. The compiled CPU kernel then takes one pass; the other
        kernels compute their own.
    """

    query: Any
    key: Any
    scale: float
    support: Support
    bias: Bias | None = None
    softcap: float | None = None
    lse: Any = None

    def __post_init__(self) -> None:
        b, h, n, d = self.query.shape
        if self.key.shape[0] != b or self.key.shape[2:] != (n, d) or h % self.key.shape[1]:
            raise ValueError(f"keys of shape {tuple(self.key.shape)} do not fit queries of shape {tuple(self.query.shape)}")
        if self.support.n != n:
            raise ValueError(f"a support over {self.support.n} positions for {n} positions")
        if self.lse is not None and tuple(self.lse.shape) != (b, h, n):
            raise ValueError(f"normalisers of shape {tuple(self.lse.shape)} for queries of shape {tuple(self.query.shape)}")


def accumulate(inputs: AttentionInputs, sums: TiledSums | None = None, *, tile: int = TILE, map_size: int = MAP_SIZE,
               blocks_per_tile: int | None = None, kernel: str | None = None) -> TiledSums:
    """Add every block of ``inputs`` to ``sums`` (new sums when None); returns the sums.

    Parameters
    ----------
    inputs
        One layer's queries, keys and the rest of its attention.
    sums
        The layer's sums so far.
    tile
        Queries and keys per tile (a positive integer).
    map_size
        Side of the block-averaged map when new sums are made.
    blocks_per_tile
        Blocks computed together in one tile (None: one on a CPU; on a GPU as many as :data:`TILE_ENTRIES` allows).
    kernel
        What :func:`~posviz.observe.tiled.choice.choose_kernel` chose for these inputs (``triton``, ``native`` or
        ``torch``), where the caller chose already; None: chosen here.

    Notes
    -----
    Attention with no additive term takes a fused kernel instead (its own tiles; ``tile`` and ``blocks_per_tile``
    are for these): on a CUDA device with Triton the Triton kernel of :mod:`posviz.observe.tiled.fused`, on the CPU
    where a C compiler works the compiled loop of :mod:`posviz.observe.tiled.native`; ``$POSVIZ_TILED_KERNEL``
    chooses (``torch``: these tiles always).
    """
    import torch

    from posviz.observe.tiled.choice import choose_kernel
    from posviz.observe.tiled.fused import accumulate_fused
    from posviz.observe.tiled.native import accumulate_native

    if not isinstance(tile, int) or isinstance(tile, bool) or tile < 1:
        raise ValueError(f"the tile size must be a positive integer, got {tile!r}")
    which = choose_kernel(inputs) if kernel is None else kernel
    if which == "triton":
        return accumulate_fused(inputs, sums, map_size=map_size)
    if which == "native":
        return accumulate_native(inputs, sums, map_size=map_size)
    batch, heads, n, _ = inputs.query.shape
    device = inputs.query.device
    if device.type == "cpu":
        _resolve_vml_dispatch()
    if sums is None:
        sums = TiledSums.zeros(heads, n, map_size, device)
    edges, bin_of = (torch.as_tensor(x, device=device) for x in distance_bins(n))  # bin_of: distance -> its bin
    side = min(tile, n)
    chunk = blocks_per_tile or (1 if device.type == "cpu" else max(1, TILE_ENTRIES // (heads * side * side)))
    with torch.no_grad():
        for b0 in range(0, batch, chunk):
            blocks = range(b0, min(batch, b0 + chunk))
            q, k = _heads_view(inputs, blocks)
            for i0 in range(0, n, tile):
                rows = _QueryTile(inputs, q, k, blocks, i0, min(n, i0 + tile))
                lse, top = rows.normalisers(tile)
                rows.second_pass(tile, lse, top, sums, edges, bin_of)
    sums.blocks += batch
    return sums


@functools.lru_cache(maxsize=1)
def _resolve_vml_dispatch() -> None:
    """Call each element-wise function of the tiles once on one element, before any call that threads share.

    oneMKL picks the kernel of each of its vector math functions on the function's first call; first calls made
    at once by torch's intra-op threads can run the low-accuracy kernel on one thread's share of the tensor
    (pytorch/pytorch#188792). Measured here: in about one process in five on two threads, the first ``exp`` of the
    tiles gave a quarter of a tile weights off by up to 1.5e-4 (relative), and row sums off by 5e-5, five times the
    tolerance against eager maps; with this call first, none in fifteen.
    """
    import torch

    for dtype in (torch.float32, torch.float64):
        one = torch.ones(1, dtype=dtype)
        torch.exp(one), torch.log(one), torch.tanh(one)


def _heads_view(inputs: AttentionInputs, blocks: range) -> tuple[Any, Any]:
    """The blocks' queries ``(blocks, kv_heads, group, n, d)`` and keys ``(blocks, kv_heads, 1, n, d)`` in float32."""
    q, k = inputs.query[blocks.start : blocks.stop].float(), inputs.key[blocks.start : blocks.stop].float()
    kv = k.shape[1]
    return q.reshape(q.shape[0], kv, q.shape[1] // kv, *q.shape[2:]), k[:, :, None]


class _QueryTile:
    """The queries ``i0:i1`` of some blocks, **rows reversed** (row ``r`` is query ``i1 - 1 - r``).

    A tile is ``(blocks x heads, rows, keys)``: every block of the chunk at once; sums over blocks are taken when a
    tile's results are added to the layer's sums.

    Reversed rows put entry ``(r, j)`` of a tile on offset column ``j + r`` of a padded buffer, so the diagonal sums
    of a tile are a reshape and one sum (:meth:`_diagonal_sums`), without a flipped copy per tile. Per-row results
    are flipped back once, at the end of the query tile. Tiles are float32 (the precision of the model's own
    attention); every sum across tiles is float64.
    """

    def __init__(self, inputs: AttentionInputs, q: Any, k: Any, blocks: range, i0: int, i1: int) -> None:
        import torch

        self.inputs, self.support, self.blocks, self.i0, self.i1 = inputs, inputs.support, blocks, i0, i1
        self.q, self.k = q[:, :, :, i0:i1].flip(-2), k
        self.heads = q.shape[1] * q.shape[2]
        self.rows = i1 - i0
        self.position = torch.arange(i1 - 1, i0 - 1, -1, device=q.device)  # the query of each row
        self._buffers: dict[int, Any] = {}

    def key_tiles(self, tile: int) -> list[tuple[int, int]]:
        n = self.support.n
        return [(j0, min(n, j0 + tile)) for j0 in range(0, n, tile) if self.support.touches(self.i0, self.i1, j0, min(n, j0 + tile))]

    def logits(self, j0: int, j1: int) -> tuple[Any, Any]:
        """``(heads, rows, j1 - j0)`` float32 logits, ``-inf`` outside the support; the support's tile (None: all in)."""
        import torch

        inputs = self.inputs
        s = torch.matmul(self.q, self.k[:, :, :, j0:j1].transpose(-1, -2)).flatten(0, 2)  # (blocks x heads, rows, keys)
        s.mul_(inputs.scale)
        if inputs.softcap is not None:
            s = torch.tanh(s / inputs.softcap).mul_(inputs.softcap)
        if inputs.bias is not None:
            parts = [inputs.bias(b, self.i0, self.i1, j0, j1) for b in self.blocks]
            if parts[0] is not None:
                shape = (self.heads, self.i1 - self.i0, j1 - j0)
                bias = torch.stack([p.to(device=s.device, dtype=s.dtype).expand(shape) for p in parts]).flatten(0, 1)
                s = s + bias.flip(-2)
        if self.support.covers(self.i0, self.i1, j0, j1):
            return s, None
        keep = self.support.keep(torch.arange(j0, j1, device=s.device)[None, :] - self.position[:, None])
        return s.masked_fill_(~keep, float("-inf")), keep

    def normalisers(self, tile: int) -> tuple[Any, Any]:
        """Pass 1, the online softmax: each row's ``log sum_j exp(s_ij)`` (float64) and largest logit (float32)."""
        import torch

        top = total = None
        for j0, j1 in self.key_tiles(tile):
            s, _ = self.logits(j0, j1)
            new = s.amax(dim=-1) if top is None else torch.maximum(top, s.amax(dim=-1))
            shift = torch.where(torch.isinf(new), torch.zeros_like(new), new)  # a row with no key yet keeps a sum of 0
            part = torch.exp(s - shift[..., None]).sum(dim=-1).double()
            total = part if total is None else total * torch.exp((top - shift).double()) + part
            top = new
        return top.double() + torch.log(total), top

    def second_pass(self, tile: int, lse: Any, top: Any, sums: TiledSums, edges: Any, bin_of: Any) -> None:
        """Pass 2: the exact weights of these queries, tile by tile, into ``sums``."""
        import torch

        f64 = torch.float64  # every sum across tiles
        n, stacked, rows, i0, i1 = self.support.n, lse.shape[0], self.rows, self.i0, self.i1
        chunk = len(self.blocks)

        def per_head(x: Any) -> Any:  # (blocks x heads, ...) -> summed over blocks: (heads, ...)
            return x.reshape(chunk, -1, *x.shape[1:]).sum(dim=0)

        # weighted: sum_j a_ij (shift_i - s_ij), each term >= 0; the entropy is that plus (lse - shift) * mass, where
        # lse * mass - sum_j a_ij s_ij would cancel the digits of peaked rows with large logits
        mass, squares, weighted = (torch.zeros_like(lse) for _ in range(3))
        by_distance = torch.zeros((stacked, rows, len(edges) - 1), dtype=torch.float32, device=lse.device)
        shift = lse.float()[..., None]
        m = sums.map.shape[-1]
        for j0, j1 in self.key_tiles(tile):
            s, keep = self.logits(j0, j1)
            a = torch.exp(s - shift)
            # the sums that the positional share and the Toeplitz scores difference (sums of squares less squared
            # sums: near-uniform heads cancel most digits) are float64 from the weights on; the others float32
            # within a tile (at most `tile` terms), float64 across tiles
            wide = a.double()
            mass += wide.sum(dim=-1)
            squares += torch.einsum("hij,hij->hi", wide, wide)
            gap = shift - s
            weighted += torch.einsum("hij,hij->hi", a, gap if keep is None else gap.masked_fill(~keep, 0.0))
            sums.received[:, j0:j1] += per_head(a.sum(dim=-2))
            if j0 == 0:  # queries 1 … n - 1 (the last row is query 0 when i0 == 0)
                sums.sink += per_head(a[:, : rows - (i0 == 0), 0].sum(dim=-1))
            base = j0 - i1 + n  # index of the tile's lowest offset, j0 - (i1 - 1), among the (2n - 1) offsets
            sums.offsets[:, base : base + rows + (j1 - j0) - 1] += per_head(self._diagonal_sums(wide))
            distance = (torch.arange(j0, j1, device=a.device)[None, :] - self.position[:, None]).abs_()
            by_distance.scatter_add_(2, bin_of[distance].expand(stacked, -1, -1), a)
            if m == n:
                sums.map[:, i0:i1, j0:j1] += per_head(wide).flip(-2)
            else:
                _add_pooled(sums.map, per_head(wide), self.position, j0, j1, n)
        sums.row_mass[:, i0:i1] += per_head(mass).flip(-1)
        sums.row_sq[:, i0:i1] += per_head(squares).flip(-1)
        sums.row_sum_sq[:, i0:i1] += per_head(mass * mass).flip(-1)
        sums.entropy[:, i0:i1] += per_head((lse - shift[..., 0].double()) * mass + weighted).flip(-1)
        sums.max_weight[:, i0:i1] += per_head(torch.exp(top.double() - lse)).flip(-1)
        kept = rows - (i0 == 0)  # the spans of queries 1 … n - 1, as every per-query statistic
        for target, counts in ((0.5, sums.span50), (0.9, sums.span90)):
            span = _spans(by_distance[:, :kept].double(), mass[:, :kept] * target, edges)  # (blocks x heads, kept)
            span = span.reshape(chunk, -1, kept).transpose(0, 1).reshape(counts.shape[0], -1)  # (heads, blocks x kept)
            counts.scatter_add_(1, span, torch.ones_like(span, dtype=f64))

    def _diagonal_sums(self, a: Any) -> Any:
        """``(heads, rows + tj - 1)``: the sums of a tile along each offset, lowest offset first.

        In a zero-padded buffer one column wider than ``rows + tj - 1`` per row, read flat with rows of that width,
        entry ``(r, j)`` of the reversed-row tile lands in column ``j + r``: its offset, counted from the lowest.
        """
        import torch

        heads, rows, tj = a.shape
        buffer = self._buffers.get(tj)
        if buffer is None:
            buffer = self._buffers[tj] = torch.zeros((heads, rows, tj + rows), dtype=a.dtype, device=a.device)
        buffer[:, :, :tj] = a
        width = rows + tj - 1
        return buffer.reshape(heads, -1)[:, : rows * width].reshape(heads, rows, width).sum(dim=-2)


def _add_pooled(grid: Any, a: Any, position: Any, j0: int, j1: int, n: int) -> None:
    """Add a tile into the ``(heads, m, m)`` grid of position blocks (position ``i`` in block ``i * m // n``)."""
    import torch

    m = grid.shape[-1]
    rows = position * m // n
    cols = torch.arange(j0, j1, device=a.device) * m // n
    c0 = int(cols[0])
    by_col = torch.zeros((a.shape[0], a.shape[1], int(cols[-1]) - c0 + 1), dtype=a.dtype, device=a.device)
    by_col.index_add_(2, cols - c0, a)
    grid[:, :, c0 : c0 + by_col.shape[-1]].index_add_(1, rows, by_col.to(grid.dtype))


def _spans(by_distance: Any, target: Any, edges: Any) -> Any:
    """Per query, the smallest distance ``D`` whose keys ``|j - i| <= D`` hold ``target`` of its mass (int64).

    Exact in the one-distance bins; in a wider bin the mass is taken as spread evenly over its distances.
    """
    import torch

    cum = by_distance.cumsum(dim=-1)
    last = by_distance.shape[-1] - 1
    m = torch.searchsorted(cum, target[..., None]).clamp_max(last)  # the first bin reaching the target
    before = torch.where(m > 0, cum.gather(-1, (m - 1).clamp_min(0)), torch.zeros_like(target[..., None]))
    inside = by_distance.gather(-1, m).clamp_min(torch.finfo(torch.float64).tiny)
    lo, width = edges[m], edges[m + 1] - edges[m]
    frac = ((target[..., None] - before) / inside).clamp(0.0, 1.0)
    span = lo + torch.ceil(frac * width).long().clamp_min(1) - 1
    return span.squeeze(-1).clamp(0, int(edges[-1]) - 1)
