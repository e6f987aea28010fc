"""The ``offset-cosine`` views: its numbers for one model (a series point, a report line) and its figure."""

from __future__ import annotations

from typing import Any


def values(result: Any) -> dict[str, float]:
    """The last measured layer's cosine at offsets 1 and 8 and past half the block."""
    last = result.records()[-1]
    return {"cos_1": last["cos_1"], "cos_8": last.get("cos_8", float("nan")), "cos_far": last["cos_far"]}


def plot(result: Any, fig: Any = None) -> Any:
    """Mean cosine against offset (log scale), one line per layer, drawn into ``fig`` (a new figure when ``None``:
    a report passes its page)."""
    import matplotlib.pyplot as plt
    import numpy as np

    if fig is None:
        fig = plt.figure(figsize=(7, 4), layout="constrained")
    ax = fig.subplots()
    cmap = plt.get_cmap("viridis")
    offsets = np.arange(1, result.cosine.shape[1])
    for row, layer in enumerate(result.layers):
        ax.plot(offsets, result.cosine[row, 1:], color=cmap(row / max(len(result.layers) - 1, 1)), lw=1,
                label=f"layer {layer}")
    ax.set_xscale("log")
    ax.set_xlabel("offset k (positions)")
    ax.set_ylabel("mean cos(h_i, h_i+k)")
    ax.set_title(f"{result.model}: how alike the hidden states are, by distance", fontsize=10)
    ax.legend(fontsize=7, ncol=2)
    return fig
