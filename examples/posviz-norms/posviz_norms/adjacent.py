"""``adjacent-cosine``: how alike the hidden states of neighbouring positions are, layer by layer, on text.

A measure on text from another package: it takes part in posviz's one pass over text (the model loaded once, each
batch run once for every text measure), so ``posviz trajectory RUN --measure attention,adjacent-cosine``, ``posviz
report MODEL --corpus FILE --measure adjacent-cosine`` and ``posviz explore MODEL --corpus FILE --measure
adjacent-cosine`` run it beside posviz's own measures, with no change to posviz.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from posviz.measures import Measure
from posviz.observe.hidden_states_measure import HiddenStatesObserver, hidden_states_request

#: Distances at which the cosine is kept: the next position and one further away.
DISTANCES = (1, 8)


@dataclass(frozen=True)
class AdjacentResult:
    """Per layer, the mean cosine between the states at positions i and i + k, for k in :data:`DISTANCES`."""

    model: str
    layers: list[int]
    cosines: np.ndarray  # (layers, len(DISTANCES))
    blocks: int

    def records(self) -> list[dict[str, Any]]:
        return [{"layer": layer, **{f"cos_{k}": float(self.cosines[row, j]) for j, k in enumerate(DISTANCES)}}
                for row, layer in enumerate(self.layers)]


class Adjacent(HiddenStatesObserver):
    """The observer: asks for the hidden states and sums the cosines of each chosen layer."""

    def __init__(self, layers: list[int], n: int) -> None:
        self.layers, self.sums, self.pairs, self.blocks = layers, np.zeros((len(layers), len(DISTANCES))), np.zeros(len(DISTANCES)), 0

    def after(self, ids: Any, out: Any) -> None:
        import torch

        for row, layer in enumerate(self.layers):
            h = torch.nn.functional.normalize(out.hidden_states[layer].detach().double(), dim=-1)
            for j, k in enumerate(DISTANCES):
                self.sums[row, j] += float((h[:, :-k] * h[:, k:]).sum())
        self.pairs += [ids.shape[0] * (ids.shape[1] - k) for k in DISTANCES]
        self.blocks += int(ids.shape[0])

    def finish(self, run: Any) -> AdjacentResult:
        return AdjacentResult(run.loaded.label, list(self.layers), self.sums / self.pairs, self.blocks)


#: Its part in a text pass, from posviz's series options (it uses ``layers``; default every hidden state).
request = hidden_states_request("adjacent-cosine", Adjacent)


def values(result: AdjacentResult) -> dict[str, float]:
    """The last layer's cosines at each distance."""
    return {f"cos_{k}": float(result.cosines[-1, j]) for j, k in enumerate(DISTANCES)}


TEXT_MEASURE = Measure(
    "adjacent-cosine", "Cosine between the hidden states of positions i and i + 1 (and i + 8), layer by layer, on text",
    needs="text", reads=("hidden states",), options=frozenset({"corpus", "seq_len", "max_blocks", "layers"}),
    request="posviz_norms.adjacent:request", values="posviz_norms.adjacent:values",
    columns=(("cos_1", "cos(i, i+1)"), ("cos_8", "cos(i, i+8)")),
)
