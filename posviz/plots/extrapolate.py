"""Figure of ``posviz extrapolate``: loss and attention entropy against the length, within and beyond training.

One panel of held-out loss against the length (log2 axis), one line per model or
RoPE-scaling variant (colour: model; line style: variant), with each model's
training length marked by a vertical line of its colour; lengths without a loss
leave a gap. Beside it, the loss by position within the window at each series'
longest length with a loss (does more context keep helping, and where does it
stop?). Then one panel per model and variant: the attention entropy (mean over
the heads of each layer, one line per layer) against the length, beside the entropy
of uniform attention over the keys each query sees.
"""

from __future__ import annotations

import math
import textwrap
from typing import Any

import numpy as np

from posviz.plots.common import keep_min_span, new_figure, short_label

_STYLES = ("-", "--", ":", "-.")
_MARKERS = ("o", "s", "^", "D", "v", "P")


def _series(result: Any) -> dict[tuple[str, str], list[Any]]:
    """``{(model, variant): records by length}``, in the result's order."""
    out: dict[tuple[str, str], list[Any]] = {}
    for r in result.runs:
        out.setdefault((r.model, r.variant), []).append(r)
    return out


def _uniform_entropy(n: int, causal: bool) -> float:
    """Mean over queries 1..n-1 of log(keys seen): the entropy of uniform attention."""
    return float(np.mean(np.log(np.arange(2, n + 1)))) if causal else math.log(n)


def _length_axis(ax, lengths: list[int]) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths)
    ax.set_xticklabels([str(x) for x in lengths], fontsize=7)
    ax.minorticks_off()
    ax.set_xlabel("length (positions)", fontsize=8)
    ax.tick_params(labelsize=7)


def _trained_lines(ax, series: dict[tuple[str, str], list[Any]], colours: dict[str, str]) -> None:
    seen = set()
    for (model, _), recs in series.items():
        trained = recs[0].training_length
        if trained is not None and model not in seen:
            seen.add(model)
            ax.axvline(trained, color=colours[model], ls=":", lw=1, alpha=0.8)


def _loss_panel(ax, result: Any, series: dict[tuple[str, str], list[Any]], colours: dict[str, str]) -> None:
    variants = list(dict.fromkeys(v for _, v in series))
    drawn = False
    for (model, variant), recs in series.items():
        x = [r.length for r in recs]
        y = [np.nan if r.loss is None else r.loss for r in recs]
        if np.isfinite(y).any():
            drawn = True
            label = short_label(model, 32) + ("" if variant == "unscaled" else f" ({variant})")
            v = variants.index(variant)
            ax.plot(x, y, marker=_MARKERS[v % len(_MARKERS)], ms=3.5, color=colours[model], ls=_STYLES[v % len(_STYLES)],
                    label=label)
    _trained_lines(ax, series, colours)
    _length_axis(ax, result.lengths)
    keep_min_span(ax, y=0.1)  # a loss that moves by 0.001 nats should not fill the panel
    ax.set_ylabel("held-out loss (nats per scored token)", fontsize=8)
    ax.set_title("loss (dotted: training length)", fontsize=9)
    if drawn:
        ax.legend(fontsize=6.5, frameon=False)
    else:
        reasons = sorted({r.reason for r in result.runs if r.reason})
        ax.text(0.5, 0.5, "\n".join(textwrap.wrap("no loss: " + "; ".join(reasons), 50)), ha="center", va="center",
                fontsize=7, color="0.3", transform=ax.transAxes)


def _position_panel(ax, series: dict[tuple[str, str], list[Any]], colours: dict[str, str]) -> None:
    """Loss by position within the window (bucketed), at the longest length of each series that has a loss."""
    variants = list(dict.fromkeys(v for _, v in series))
    for (model, variant), recs in series.items():
        found = [(r, r.loss_by_position()) for r in recs if r.loss is not None and r.position_nll is not None]
        if not found:
            continue
        r, (starts, losses) = found[-1]
        y = [np.nan if v is None else v for v in losses]
        v = variants.index(variant)
        ax.plot(starts, y, marker=_MARKERS[v % len(_MARKERS)], ms=2.5, color=colours[model], ls=_STYLES[v % len(_STYLES)],
                label=f"{short_label(model, 24)}{'' if variant == 'unscaled' else f' ({variant})'}, n = {r.length}")
        if r.training_length is not None and r.training_length < r.length:
            ax.axvline(r.training_length, color=colours[model], ls=":", lw=1, alpha=0.8)
    ax.set_xlabel("position in the window (tokens of context before the scored one)", fontsize=8)
    ax.set_ylabel("loss (nats), bucket mean", fontsize=8)
    ax.set_title("loss by position (dotted: training length)", fontsize=9)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=6, frameon=False)


def _entropy_panel(ax, result: Any, key: tuple[str, str], recs: list[Any], colours: dict[str, str]) -> None:
    import matplotlib

    ran = [r for r in recs if r.heads]
    layers = sorted({layer for r in ran for layer in r.heads})
    cmap = matplotlib.colormaps["viridis"]
    for i, layer in enumerate(layers):
        x = [r.length for r in ran]
        y = [float(np.nanmean(r.heads[layer].entropy)) for r in ran]
        ax.plot(x, y, marker="o", ms=3, color=cmap(i / max(1, len(layers) - 1)), label=f"layer {layer}")
    if ran:
        ax.plot([r.length for r in ran], [_uniform_entropy(r.length, bool(r.causal)) for r in ran], color="0.5", ls="--",
                lw=1, label="uniform attention")
    for r in recs:
        if not r.heads:  # a length the model could not take
            ax.annotate("n/a", (r.length, 0.03), xycoords=("data", "axes fraction"), ha="center", fontsize=7, color="0.35")
    _trained_lines(ax, {key: recs}, colours)
    _length_axis(ax, result.lengths)
    ax.set_ylabel("attention entropy (nats), mean over heads", fontsize=8)
    model, variant = key
    ax.set_title(short_label(model, 40) + ("" if variant == "unscaled" else f" ({variant})"), fontsize=9)
    ax.legend(fontsize=6, frameon=False, ncols=2 if len(layers) > 6 else 1)


def plot_extrapolation(result: Any, *, fig=None):
    """Loss and per-layer attention entropy against the length, for every model and variant of a result.

    Parameters
    ----------
    result
        From :func:`posviz.extrapolation.extrapolate.extrapolate`.
    fig
        A figure to draw on (a report page, which then carries the title and conventions); a new one by default.

    Returns
    -------
    matplotlib.figure.Figure
    """
    series = _series(result)
    models = list(dict.fromkeys(m for m, _ in series))
    colours = {m: f"C{i % 10}" for i, m in enumerate(models)}
    by_position = any(r.position_nll is not None and r.loss is not None for r in result.runs)
    panels = 1 + by_position + len(series)
    cols = min(panels, 3)
    rows = math.ceil(panels / cols)
    page = fig is not None
    fig = fig or new_figure(4.2 * cols, 3.4 * rows + 0.6)
    axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False)).ravel()
    _loss_panel(axes[0], result, series, colours)
    if by_position:
        _position_panel(axes[1], series, colours)
    for ax, (key, recs) in zip(axes[1 + by_position :], series.items(), strict=False):
        _entropy_panel(ax, result, key, recs, colours)
    for ax in axes[panels:]:
        ax.set_visible(False)
    if page:
        return fig
    fig.suptitle("Beyond the trained length: held-out loss and attention entropy", fontsize=10)
    fig.supxlabel("\n".join(textwrap.wrap(result.conventions, 160)), fontsize=6, color="0.25", x=0.01, ha="left")
    return fig
