"""The ``state-norms`` views: its numbers for one model (a series point, a report line) and its figure."""

from __future__ import annotations

from typing import Any


def values(result: Any) -> dict[str, float]:
    """The layer where the first position stands out most: its norm and largest activation over the median's."""
    records = result.records()
    peak = max(records, key=lambda r: r["first_max_ratio"])
    return {"first_norm_ratio": peak["first_norm_ratio"], "first_max_ratio": peak["first_max_ratio"],
            "peak_layer": float(peak["layer"])}


def plot(result: Any, fig: Any = None) -> Any:
    """Mean norm and largest activation against position, one line per layer (log scale), drawn into ``fig``
    (a new figure when ``None``: a report passes its page)."""
    import matplotlib.pyplot as plt

    if fig is None:
        fig = plt.figure(figsize=(10, 3.8), layout="constrained")
    axes = fig.subplots(1, 2)
    cmap = plt.get_cmap("viridis")
    for row, layer in enumerate(result.layers):
        colour = cmap(row / max(len(result.layers) - 1, 1))
        axes[0].plot(result.mean_norm[row], color=colour, lw=1, label=f"layer {layer}")
        axes[1].plot(result.max_abs[row], color=colour, lw=1)
    for ax, title in zip(axes, ("mean ||h_i|| over blocks", "largest |h_i,k| over blocks and dims"), strict=True):
        ax.set_yscale("log")
        ax.set_xlabel("position i")
        ax.set_title(title, fontsize=10)
    axes[0].legend(fontsize=7, ncol=2)
    return fig
