"""The Triton code of :mod:`posviz.observe.tiled.fused` (imported only when the fused kernel runs: it needs Triton).

Set ``TRITON_INTERPRET=1`` before this module is first imported to run the kernel on the CPU, in Triton's
interpreter (the tests do).
"""

import triton
import triton.language as tl


@triton.jit
def _tanh(x):
    # tanh from exp (Triton's interpreter has no libdevice): absolute error about 6e-8
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(x < 0, -t, t)


@triton.jit
def _logits(q, k_block, j0, rows, skn, skd, n, scale, softcap, window,
           BN: tl.constexpr, D: tl.constexpr, DH: tl.constexpr, CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr,
           HAS_CAP: tl.constexpr):
    cols = j0 + tl.arange(0, BN)
    dims = tl.arange(0, D)
    kt = tl.load(k_block + cols[:, None].to(tl.int64) * skn + dims[None, :] * skd,
                 mask=(cols[:, None] < n) & (dims[None, :] < DH), other=0.0).to(tl.float32)
    s = tl.dot(q, tl.trans(kt), input_precision="ieee") * scale
    if HAS_CAP:
        s = softcap * _tanh(s / softcap)
    offset = cols[None, :] - rows[:, None]
    valid = (rows[:, None] < n) & (cols[None, :] < n)
    if CAUSAL:
        valid = valid & (offset <= 0)
    if HAS_WINDOW:
        valid = valid & (offset < window) & (offset > -window)
    return tl.where(valid, s, float("-inf")), valid, cols, offset


@triton.jit
def _span_counts(hist, cum, mass, target, kept, counts_h, edges_ptr, n, bins,
                NBP: tl.constexpr):
    # the smallest distance within which `target` of the query's mass lies (see kernel._spans)
    want = mass * target
    index = tl.arange(0, NBP)[None, :]
    m = tl.minimum(tl.sum((cum < want[:, None]).to(tl.int32), 1), bins - 1)
    before = tl.sum(tl.where(index == (m - 1)[:, None], cum, 0.0), 1)
    inside = tl.maximum(tl.sum(tl.where(index == m[:, None], hist, 0.0), 1), 2.2250738585072014e-308)
    lo = tl.load(edges_ptr + m)
    width = tl.load(edges_ptr + m + 1) - lo
    frac = tl.minimum(tl.maximum((want - before) / inside, 0.0), 1.0)
    span = lo + tl.maximum(tl.ceil(frac * width.to(tl.float64)).to(tl.int64), 1) - 1
    span = tl.minimum(tl.maximum(span, 0), n - 1)
    tl.atomic_add(counts_h + span, tl.zeros_like(want) + 1.0, mask=kept)


@triton.jit
def _add_to_map(map_h, a, wide, valid, rows, cols, i0, j0, n, m, BM: tl.constexpr, BN: tl.constexpr, EXACT_MAP: tl.constexpr):
    # the tile into the head's map: entry by entry where the map is exact, else summed into its cells of position blocks
    if EXACT_MAP:
        tl.atomic_add(map_h + rows[:, None] * m + cols[None, :], wide, mask=valid)
    else:
        r0 = (i0 * m) // n
        c0 = (j0 * m) // n
        # one-hot products, float32 (not every Triton has float64 tl.dot): about 1e-7 relative per tile
        by_row = (tl.arange(0, BM)[:, None] == ((rows * m) // n - r0)[None, :]).to(tl.float32)
        by_col = (((cols * m) // n - c0)[:, None] == tl.arange(0, BN)[None, :]).to(tl.float32)
        cells = tl.dot(by_row, tl.dot(a, by_col, input_precision="ieee"), input_precision="ieee").to(tl.float64)
        u = r0 + tl.arange(0, BM)
        t = c0 + tl.arange(0, BN)
        tl.atomic_add(map_h + u[:, None] * m + t[None, :], cells,
                      mask=(u[:, None] <= ((tl.minimum(i0 + BM, n) - 1) * m) // n)
                      & (t[None, :] <= ((tl.minimum(j0 + BN, n) - 1) * m) // n))


@triton.jit
def _add_to_histogram(hist, a, offset, valid, bin_ptr, NBP: tl.constexpr):
    # each query's mass by distance bin; a tile far from the diagonal spans one to three bins
    bin_of = tl.load(bin_ptr + tl.abs(offset), mask=valid, other=0)
    first = tl.min(tl.min(tl.where(valid, bin_of, NBP), 1), 0)
    last = tl.max(tl.max(tl.where(valid, bin_of, -1), 1), 0)
    bin_index = tl.arange(0, NBP)
    for bin in range(first, last + 1):
        part = tl.sum(tl.where(bin_of == bin, a, 0.0), 1)
        hist += tl.where(bin_index[None, :] == bin, part[:, None], 0.0)
    return hist


@triton.jit
def statistics(q_ptr, k_ptr, sqb, sqh, sqn, sqd, skb, skh, skn, skd, batch, n, group, scale, softcap, window,
               offsets_ptr, mass_ptr, sq_ptr, sum_sq_ptr, entropy_ptr, max_ptr, received_ptr, sink_ptr,
               span50_ptr, span90_ptr, map_ptr, m, edges_ptr, bin_ptr, bins,
               BM: tl.constexpr, BN: tl.constexpr, D: tl.constexpr, DH: tl.constexpr, NBP: tl.constexpr,
               CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr, HAS_CAP: tl.constexpr, EXACT_MAP: tl.constexpr):
    """Add queries ``BM * program_id(0) …`` of head ``program_id(1)``, in every block, to the layer's sums.

    Launched by :func:`posviz.observe.tiled.fused.accumulate_fused` on a ``(ceil(n / BM), heads)`` grid; the pointers
    are the fields of :class:`~posviz.observe.tiled.sums.TiledSums` (float64, contiguous), ``edges_ptr`` and ``bin_ptr``
    the distance bins of :func:`~posviz.observe.tiled.sums.distance_edges` and each distance's bin.
    """
    i0 = tl.program_id(0) * BM
    h = tl.program_id(1)
    rows = i0 + tl.arange(0, BM)
    dims = tl.arange(0, D)
    in_rows = rows < n
    kept = in_rows & (rows >= 1)  # per-query statistics leave out query 0, as the PyTorch path does
    hi = n
    lo = 0
    if CAUSAL:
        hi = tl.minimum(n, i0 + BM)
    if HAS_WINDOW:
        hi = tl.minimum(hi, i0 + BM + window - 1)
        lo = tl.maximum(0, i0 - window + 1)
    lo = (lo // BN) * BN
    skew = tl.arange(0, BM + BN)  # column c of the skewed tile: offset j - i = (j0 - i0 - BM + 1) + c
    from_col = skew[None, :] + tl.arange(0, BM)[:, None] - (BM - 1)
    in_skew = (from_col >= 0) & (from_col < BN)
    from_col = tl.minimum(tl.maximum(from_col, 0), BN - 1)
    acc_mass = tl.zeros([BM], tl.float64)
    acc_sq = tl.zeros([BM], tl.float64)
    acc_sum_sq = tl.zeros([BM], tl.float64)
    acc_entropy = tl.zeros([BM], tl.float64)
    acc_max = tl.zeros([BM], tl.float64)
    received_h = received_ptr + h * n
    offsets_h = offsets_ptr + h * (2 * n - 1)
    map_h = map_ptr + h * m * m
    # each block's queries and keys: pointers advanced by one block's stride (64-bit), where b * stride in int32 could
    # overflow (a layer's queries may hold more than 2**31 elements)
    q_block = q_ptr + h.to(tl.int64) * sqh
    k_block = k_ptr + (h // group).to(tl.int64) * skh
    for _ in range(batch):
        q = tl.load(q_block + rows[:, None].to(tl.int64) * sqn + dims[None, :] * sqd,
                    mask=in_rows[:, None] & (dims[None, :] < DH), other=0.0).to(tl.float32)
        # pass 1: the online softmax
        top = tl.full([BM], float("-inf"), tl.float32)
        total = tl.zeros([BM], tl.float64)
        for j0 in range(lo, hi, BN):
            s, valid, cols, offset = _logits(q, k_block, j0, rows, skn, skd, n, scale, softcap, window,
                                            BN, D, DH, CAUSAL, HAS_WINDOW, HAS_CAP)
            new = tl.maximum(top, tl.max(s, 1))
            shift = tl.where(new == float("-inf"), 0.0, new)
            part = tl.sum(tl.exp(s - shift[:, None]), 1).to(tl.float64)
            total = total * tl.exp((top - shift).to(tl.float64)) + part
            top = new
        lse = top.to(tl.float64) + tl.log(total)
        shift = tl.where(in_rows, lse, 0.0).to(tl.float32)
        # pass 2: the exact weights into every sum
        mass = tl.zeros([BM], tl.float64)
        squares = tl.zeros([BM], tl.float64)
        weighted = tl.zeros([BM], tl.float64)
        hist = tl.zeros([BM, NBP], tl.float32)
        for j0 in range(lo, hi, BN):
            s, valid, cols, offset = _logits(q, k_block, j0, rows, skn, skd, n, scale, softcap, window,
                                            BN, D, DH, CAUSAL, HAS_WINDOW, HAS_CAP)
            a = tl.where(valid, tl.exp(s - shift[:, None]), 0.0)
            wide = a.to(tl.float64)
            mass += tl.sum(wide, 1)
            squares += tl.sum(wide * wide, 1)
            weighted += tl.sum(a * tl.where(valid, shift[:, None] - s, 0.0), 1).to(tl.float64)  # each term >= 0
            tl.atomic_add(received_h + cols, tl.sum(wide, 0), mask=cols < n)
            if j0 == 0:
                tl.atomic_add(sink_ptr + h, tl.sum(tl.where((cols[None, :] == 0) & (rows[:, None] >= 1), wide, 0.0)))
            # skewed in float32 (half the registers of float64), summed in float64: the same sums as from `wide`
            diagonal = tl.sum(tl.where(in_skew, tl.gather(a, from_col, 1), 0.0).to(tl.float64), 0)
            target = (j0 - i0 - BM + 1) + (n - 1) + skew
            tl.atomic_add(offsets_h + target, diagonal,
                          mask=(skew < BM + BN - 1) & (target >= 0) & (target < 2 * n - 1))
            _add_to_map(map_h, a, wide, valid, rows, cols, i0, j0, n, m, BM, BN, EXACT_MAP)
            hist = _add_to_histogram(hist, a, offset, valid, bin_ptr, NBP)
        acc_mass += tl.where(in_rows, mass, 0.0)
        acc_sq += tl.where(in_rows, squares, 0.0)
        acc_sum_sq += tl.where(in_rows, mass * mass, 0.0)
        acc_entropy += tl.where(in_rows, (lse - shift.to(tl.float64)) * mass + weighted, 0.0)
        acc_max += tl.where(in_rows, tl.exp(top.to(tl.float64) - lse), 0.0)
        wide_hist = hist.to(tl.float64)
        cum = tl.cumsum(wide_hist, 1)
        _span_counts(wide_hist, cum, mass, 0.5, kept, span50_ptr + h * n, edges_ptr, n, bins, NBP)
        _span_counts(wide_hist, cum, mass, 0.9, kept, span90_ptr + h * n, edges_ptr, n, bins, NBP)
        q_block += sqb
        k_block += skb
    row = h * n + rows
    tl.store(mass_ptr + row, tl.load(mass_ptr + row, mask=in_rows, other=0.0) + acc_mass, mask=in_rows)
    tl.store(sq_ptr + row, tl.load(sq_ptr + row, mask=in_rows, other=0.0) + acc_sq, mask=in_rows)
    tl.store(sum_sq_ptr + row, tl.load(sum_sq_ptr + row, mask=in_rows, other=0.0) + acc_sum_sq, mask=in_rows)
    tl.store(entropy_ptr + row, tl.load(entropy_ptr + row, mask=in_rows, other=0.0) + acc_entropy, mask=in_rows)
    tl.store(max_ptr + row, tl.load(max_ptr + row, mask=in_rows, other=0.0) + acc_max, mask=in_rows)
