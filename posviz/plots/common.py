"""Shared figure helpers: atomic saving, titles, pooling limits."""

from __future__ import annotations

import os
from pathlib import Path

from posviz.util.atomic import atomic_path

FIGURE_EXTENSIONS: tuple[str, ...] = (".png", ".pdf", ".svg")


def new_figure(width: float, height: float):
    """A Figure with the Agg canvas attached, independent of pyplot."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig, path: str | os.PathLike, *, dpi: int = 150) -> Path:
    """Save atomically; the format follows the extension (png, pdf, svg).

    PDF and SVG output honours ``SOURCE_DATE_EPOCH`` (matplotlib reads it), so
    identical input gives identical bytes.
    """
    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    metadata = {"Creator": "posviz"} if fmt in ("pdf", "svg") else {"Software": "posviz"}
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=fmt, dpi=dpi, metadata=metadata)
    return path


def keep_min_span(ax, *, x: float | None = None, y: float | None = None) -> None:
    """Widen an axis whose view spans less than ``x`` (or ``y``) to that span, about its centre.

    Autoscaling stretches any change to the full width: a Toeplitzness that moves by
    0.001 would look like one that moves by 0.5. Call after plotting and margins.
    """
    for span, get, put in ((x, ax.get_xlim, ax.set_xlim), (y, ax.get_ylim, ax.set_ylim)):
        if span is not None:
            lo, hi = get()
            if hi - lo < span:
                put((lo + hi - span) / 2, (lo + hi + span) / 2)


def short_label(text: str, width: int = 48) -> str:
    """Shorten long paths for titles, keeping the end."""
    return text if len(text) <= width else "…" + text[-(width - 1) :]
