"""How a result shows itself when a notebook cell ends with it: its figure and its table, inline.

``import posviz`` inside IPython or Jupyter registers these functions as the HTML formatters of the result types
(by type name, so nothing heavy is imported then): a cell ending in ``posviz.attention(...)``, ``posviz.hidden(...)``
or ``posviz.extrapolate(...)`` shows its figure and table, as a pandas DataFrame shows itself. The results stay
below the drawing layer; the drawing layer knows them. The HTML holds everything (the figure as an embedded PNG, the
table as HTML), so a saved notebook shows it offline and nothing is fetched. Figures are made off pyplot
(:func:`posviz.plots.common.new_figure`), so a notebook's inline backend does not show them a second time.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Callable
from typing import Any

#: Rows of the table shown inline (the rest are one ``to_frame()`` away).
MAX_ROWS = 24


def result_html(title: str, conventions: str, figure: Callable[[], Any] | None, frame: Any, *, dpi: int = 80) -> str:
    """The HTML of a result: a title, its conventions line, its figure (PNG) and the first rows of its table.

    Parameters
    ----------
    title
        What was measured, of which model.
    conventions
        The result's one line on how the numbers were made.
    figure
        Makes the result's figure (a matplotlib Figure), or None for no figure.
    frame
        The result's table (a pandas DataFrame); columns holding lists (curves, profiles) are left out of the
        inline table, which stays readable; ``to_frame()`` keeps them.
    dpi
        Resolution of the embedded PNG.
    """
    parts = [f"<div class='posviz-result'><h4 style='margin: 0.3em 0'>{html.escape(title)}</h4>",
             f"<p style='font-size: 85%; color: #555; margin: 0.2em 0 0.6em'>{html.escape(conventions)}</p>"]
    if figure is not None:
        fig = figure()
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=dpi)
        data = base64.b64encode(buffer.getvalue()).decode("ascii")
        parts.append(f"<img alt='{html.escape(title)}' style='max-width: 100%' src='data:image/png;base64,{data}'/>")
    scalar = [c for c in frame.columns if not frame[c].map(lambda v: isinstance(v, (list, tuple, dict))).any()]
    table = frame[scalar]
    parts.append(table.head(MAX_ROWS).to_html(index=False, float_format=lambda v: f"{v:.4g}", border=0))
    if len(table) > MAX_ROWS:
        parts.append(f"<p style='font-size: 85%; color: #555'>{len(table) - MAX_ROWS} more rows: <code>.to_frame()</code> "
                     "holds them all, with every column.</p>")
    return "".join(parts) + "</div>"


def attention_html(result: Any) -> str:
    """An :class:`~posviz.observe.attention.AttentionResult`: the figure of its first layer and its per-head table."""
    from posviz.plots.attention import plot_attention_layer

    return result_html(f"posviz attention: {result.model}, layer {result.layers[0]}", result.conventions,
                       lambda: plot_attention_layer(result, result.layers[0]), result.to_frame())


def hidden_html(result: Any) -> str:
    """A :class:`~posviz.observe.hidden.HiddenResult`: its layer-by-layer figure and per-layer table."""
    from posviz.plots.hidden import plot_hidden

    return result_html(f"posviz hidden: {result.model}", result.conventions, lambda: plot_hidden(result), result.to_frame())


def extrapolation_html(result: Any) -> str:
    """An :class:`~posviz.extrapolation.result.ExtrapolationResult`: loss and attention against length, one row per length."""
    import pandas as pd

    from posviz.plots.extrapolate import plot_extrapolation

    models = ", ".join(dict.fromkeys(r.model for r in result.runs))
    return result_html(f"posviz extrapolate: {models}", result.conventions, lambda: plot_extrapolation(result),
                       pd.DataFrame(result.records()))


#: ``(module, class, function of this module)``: what ``import posviz`` registers in IPython.
FORMATTERS = (("posviz.observe.attention_result", "AttentionResult", "attention_html"),
              ("posviz.observe.hidden_result", "HiddenResult", "hidden_html"),
              ("posviz.extrapolation.result", "ExtrapolationResult", "extrapolation_html"))
