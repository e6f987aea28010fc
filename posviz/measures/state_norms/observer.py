"""The ``state-norms`` request and observer: per-position sums of hidden-state norms, kept while the pass runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from posviz.observe.hidden_states_measure import HiddenStatesObserver, hidden_states_request


@dataclass(frozen=True)
class StateNormsResult:
    """Per layer, the mean norm and the largest absolute activation at each position, over ``blocks`` blocks.

    Attributes
    ----------
    model, corpus, layout
        As named in outputs (the model's label, the corpus with its SHA-256, where the special tokens sit).
    layers
        Hidden-state indices (0 = the embedding output).
    mean_norm, max_abs
        ``(layers, n)``: mean over blocks of ``||h[b, i]||``, and the largest ``|h[b, i, k]|`` over blocks and ``k``.
    """

    model: str
    corpus: str
    layout: str
    layers: list[int]
    blocks: int
    mean_norm: np.ndarray
    max_abs: np.ndarray

    @property
    def conventions(self) -> str:
        """One line stating how the numbers were made."""
        return (f"{self.blocks} blocks of {self.mean_norm.shape[1]} tokens from {self.corpus}; {self.layout}; ratios "
                "over the median of positions 1 to n - 1")

    def records(self) -> list[dict[str, Any]]:
        """One plain dict per layer, JSON-ready."""
        out = []
        for row, layer in enumerate(self.layers):
            norm, top = self.mean_norm[row], self.max_abs[row]
            out.append({"model": self.model, "layer": layer, "first_norm": float(norm[0]),
                        "median_norm": float(np.median(norm[1:])), "first_norm_ratio": float(norm[0] / np.median(norm[1:])),
                        "first_max": float(top[0]), "first_max_ratio": float(top[0] / np.median(top[1:])),
                        "peak_position": int(np.argmax(top)), "blocks": self.blocks})
        return out

    def to_frame(self) -> Any:
        """The records as a pandas DataFrame, one row per layer."""
        import pandas as pd

        return pd.DataFrame(self.records())


class StateNorms(HiddenStatesObserver):
    """The observer: asks for every hidden state and adds each chosen layer's norms and largest activations."""

    def __init__(self, layers: list[int], n: int) -> None:
        self.layers, self.blocks = layers, 0
        self.norm_sum = np.zeros((len(layers), n))
        self.max_abs = np.zeros((len(layers), n))

    def after(self, ids: Any, out: Any) -> None:
        import torch

        states = out.hidden_states
        for row, layer in enumerate(self.layers):
            h = states[layer].detach().to(torch.float64)  # (B, n, d)
            self.norm_sum[row] += h.norm(dim=-1).sum(dim=0).cpu().numpy()
            self.max_abs[row] = np.maximum(self.max_abs[row], h.abs().amax(dim=(0, 2)).cpu().numpy())
        self.blocks += int(ids.shape[0])

    def finish(self, run: Any) -> StateNormsResult:
        return StateNormsResult(model=run.loaded.label, corpus=run.corpus, layout=run.layout, layers=list(self.layers),
                                blocks=self.blocks, mean_norm=self.norm_sum / max(self.blocks, 1), max_abs=self.max_abs)


#: Its part in a text pass, from posviz's series options (it uses ``layers``; default every hidden state).
request = hidden_states_request("state-norms", StateNorms)
