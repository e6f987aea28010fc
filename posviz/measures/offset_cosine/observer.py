"""The ``offset-cosine`` request and observer: per-offset sums of cosine similarities, kept while the pass runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from posviz.observe.hidden_states_measure import HiddenStatesObserver, hidden_states_request

#: Hidden dimensions transformed at once (the spectrum of a block holds (n + 1) x CHUNK complex numbers).
CHUNK = 256


@dataclass(frozen=True)
class OffsetCosineResult:
    """Per layer, the mean cosine of the hidden states ``k`` positions apart, over ``blocks`` blocks.

    Attributes
    ----------
    model, corpus, layout
        As named in outputs (the model's label, the corpus with its SHA-256, where the special tokens sit).
    layers
        Hidden-state indices (0 = the embedding output).
    cosine
        ``(layers, n)``: ``cosine[l, k]`` is the mean over blocks and ``i`` of ``cos(h[i], h[i + k])`` (``k = 0``: 1).
    """

    model: str
    corpus: str
    layout: str
    layers: list[int]
    blocks: int
    cosine: np.ndarray

    @property
    def conventions(self) -> str:
        """One line stating how the numbers were made."""
        n = self.cosine.shape[1]
        return (f"{self.blocks} blocks of {n} tokens from {self.corpus}; {self.layout}; cos(h_i, h_i+k) averaged over "
                f"the n - k pairs of each block; 'past n/2' averages offsets {n // 2} to {n - 1}")

    def records(self) -> list[dict[str, Any]]:
        """One plain dict per layer, JSON-ready: the cosine at offsets 1, 2, 4, ... and past half the block."""
        n = self.cosine.shape[1]
        out = []
        for row, layer in enumerate(self.layers):
            cos = self.cosine[row]
            record: dict[str, Any] = {"model": self.model, "layer": layer}
            k = 1
            while k < n:
                record[f"cos_{k}"] = float(cos[k])
                k *= 2
            record["cos_far"] = float(cos[n // 2:].mean())
            record["blocks"] = self.blocks
            out.append(record)
        return out

    def to_frame(self) -> Any:
        """The records as a pandas DataFrame, one row per layer."""
        import pandas as pd

        return pd.DataFrame(self.records())


class OffsetCosine(HiddenStatesObserver):
    """The observer: asks for every hidden state and adds, per chosen layer, ``sum_i cos(h_i, h_i+k)`` for every ``k``.

    With unit rows ``u_i``, ``sum_i <u_i, u_i+k>`` is the autocorrelation of each dimension along the positions,
    summed over dimensions: one real FFT of length ``2n`` per block, O(n d log n), no n × n matrix.
    """

    def __init__(self, layers: list[int], n: int) -> None:
        self.layers, self.n, self.blocks = layers, n, 0
        self.sums = np.zeros((len(layers), n))

    def after(self, ids: Any, out: Any) -> None:
        import torch

        states = out.hidden_states
        for row, layer in enumerate(self.layers):
            h = states[layer].detach().to(torch.float64)  # (B, n, d)
            unit = h / h.norm(dim=-1, keepdim=True).clamp_min(torch.finfo(torch.float64).tiny)
            power = torch.zeros(h.shape[0], self.n + 1, dtype=torch.float64, device=h.device)
            for start in range(0, h.shape[-1], CHUNK):  # a slice of the dimensions at a time: O(n * CHUNK) memory
                spectrum = torch.fft.rfft(unit[..., start:start + CHUNK], n=2 * self.n, dim=1)  # zero-padded: no wrap
                power += (spectrum.real**2 + spectrum.imag**2).sum(dim=-1)  # (B, n + 1)
            lagged = torch.fft.irfft(power, n=2 * self.n, dim=1)[:, : self.n]  # (B, n): sum_i <u_i, u_i+k>
            self.sums[row] += lagged.sum(dim=0).cpu().numpy()
        self.blocks += int(ids.shape[0])

    def finish(self, run: Any) -> OffsetCosineResult:
        pairs = np.arange(self.n, 0, -1) * max(self.blocks, 1)  # n - k pairs per block at offset k
        return OffsetCosineResult(model=run.loaded.label, corpus=run.corpus, layout=run.layout, layers=list(self.layers),
                                  blocks=self.blocks, cosine=self.sums / pairs)


#: Its part in a text pass, from posviz's series options (it uses ``layers``; default every hidden state).
request = hidden_states_request("offset-cosine", OffsetCosine)
