"""Float64 running sums of one layer's attention, filled tile by tile: what every long-context statistic needs.

One :class:`TiledSums` per layer holds, per head, arrays of length ``n`` or ``2n - 1`` and one map of at most
``map_size**2`` cells, whatever the number of blocks; no ``n x n`` array of the layer is ever held (unless
``n <= map_size``, where the map is the exact mean attention). Every field is a sum over blocks, so the sums
of several processes (or devices) combine by addition (:meth:`TiledSums.merge`).

Distances ``d = |j - i|`` are grouped by :func:`distance_edges`: one bin per distance below ``exact``
(default 64), then ``per_octave`` log-spaced bins per doubling.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

#: Distances below this get a bin each; beyond, bins are log-spaced.
EXACT_DISTANCES = 64
#: Log-spaced distance bins per doubling of the distance beyond :data:`EXACT_DISTANCES`.
BINS_PER_OCTAVE = 4
#: The side of the block-averaged mean attention map kept per head (exact below it).
MAP_SIZE = 512


def distance_edges(n: int, exact: int = EXACT_DISTANCES, per_octave: int = BINS_PER_OCTAVE) -> np.ndarray:
    """Bin edges over distances ``0 … n - 1``: ``[0, 1, …, exact, …log-spaced…, n]`` (bin ``m``: ``edges[m] <= d < edges[m+1]``)."""
    edges = list(range(min(exact, n) + 1))
    step = 0
    while edges[-1] < n:
        step += 1
        edges.append(max(edges[-1] + 1, min(n, int(np.ceil(exact * 2.0 ** (step / per_octave))))))
    return np.asarray(edges, dtype=np.int64)


def distance_bins(n: int) -> tuple[np.ndarray, np.ndarray]:
    """The bin edges of :func:`distance_edges` and, for each distance ``0 … n - 1``, the index of its bin (int64)."""
    edges = distance_edges(n)
    return edges, np.searchsorted(edges, np.arange(n), side="right") - 1


@dataclass
class TiledSums:
    """Sums over blocks of one layer's attention, per head (torch tensors on the device that made them).

    ``H`` heads, ``n`` positions, offsets ``k = j - i`` at index ``k + n - 1``.

    Attributes
    ----------
    blocks
        Blocks summed.
    offsets
        ``(H, 2n - 1)``: ``sum_b sum_i A_b[i, i + k]``, the attention mass on each diagonal.
    row_mass, row_sq, row_sum_sq
        ``(H, n)``: per query ``i``, ``sum_b sum_j A_b[i, j]``, ``sum_b sum_j A_b[i, j]**2`` and
        ``sum_b (sum_j A_b[i, j])**2``.
    entropy, max_weight
        ``(H, n)``: per query, the sum over blocks of its entropy (nats) and of its largest weight.
    received
        ``(H, n)``: per key ``j``, ``sum_b sum_i A_b[i, j]``.
    sink
        ``(H,)``: ``sum_b sum_{i >= 1} A_b[i, 0]``.
    span50, span90
        ``(H, n)``: per head, how many (block, query) pairs hold 50 % (90 %) of their mass within each distance.
    map
        ``(H, m, m)``: the attention summed over blocks and over the cells of an ``m x m`` grid of position blocks
        (``m = min(n, map_size)``; position ``i`` is in block ``i * m // n``).
    """

    blocks: int
    offsets: Any
    row_mass: Any
    row_sq: Any
    row_sum_sq: Any
    entropy: Any
    max_weight: Any
    received: Any
    sink: Any
    span50: Any
    span90: Any
    map: Any

    @classmethod
    def zeros(cls, heads: int, n: int, map_size: int = MAP_SIZE, device: Any = None) -> TiledSums:
        """Empty sums for ``heads`` heads over ``n`` positions (float64, on ``device``)."""
        import torch

        def z(*shape: int) -> Any:
            return torch.zeros(shape, dtype=torch.float64, device=device)

        m = min(n, map_size)
        return cls(0, z(heads, 2 * n - 1), z(heads, n), z(heads, n), z(heads, n), z(heads, n), z(heads, n), z(heads, n),
                   z(heads), z(heads, n), z(heads, n), z(heads, m, m))

    @property
    def heads(self) -> int:
        return int(self.row_mass.shape[0])

    @property
    def n(self) -> int:
        return int(self.row_mass.shape[1])

    @property
    def exact_map(self) -> bool:
        """Whether :attr:`map` is the whole map (one cell per entry)."""
        return int(self.map.shape[-1]) == self.n

    def merge(self, other: TiledSums) -> TiledSums:
        """The sums of both (blocks of another process or device); shapes must agree."""
        if (other.heads, other.n, other.map.shape) != (self.heads, self.n, self.map.shape):
            raise ValueError(f"cannot merge sums of {other.heads} heads x {other.n} positions into {self.heads} x {self.n}")
        out = {}
        for f in fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            out[f.name] = a + (b if f.name == "blocks" else b.to(a.device))
        return TiledSums(**out)

    def numpy(self) -> dict[str, Any]:
        """Every field as float64 numpy arrays (``blocks`` as an int)."""
        return {f.name: (getattr(self, f.name) if f.name == "blocks" else getattr(self, f.name).detach().cpu().numpy())
                for f in fields(self)}
