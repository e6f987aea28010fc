"""Other measures on text: every measure of the registry with a text-pass request that the report is asked for
(``--measure NAME``, posviz's own such as ``state-norms`` or another package's), one page per model, opt-in.

The measures run on ``--corpus`` in the same pass as the attention and hidden-states sections (one load and one
forward call per batch for all of them, :func:`posviz.report.sections.running.text_result`). Each page is the
measure's own figure (its ``plot``; without one, its records as a table), under a caption with its summary, its numbers (``values``, labelled by its
``columns``) and the result's conventions line where it has one.
"""

from __future__ import annotations

from posviz.report.context import ReportContext
from posviz.report.layout import Block, captioned_page
from posviz.report.section import Section
from posviz.report.sections.running import run_each, text_result


def build(ctx: ReportContext) -> list:
    """One page per requested measure and model; nothing without ``--measure``."""
    from posviz.measures import get_measure
    from posviz.plots.common import short_label

    pages = []
    for name in ctx.options.measures:
        measure = get_measure(name)
        values = measure.load("values")
        labels = dict(measure.columns)
        for item, result in run_each(ctx, name, lambda spec, name=name: text_result(ctx, spec, name)):
            numbers = "; ".join(f"{labels.get(k, k)} {v:.4g}" for k, v in values(result).items())
            conventions = getattr(result, "conventions", None)
            page = captioned_page(
                f"{name}: {short_label(item.label, 60)}", f"{measure.summary} (from {measure.origin})",
                f"{item.label}: {name}", f"{item.label}. {numbers}." + (f" {conventions}." if conventions else ""))
            if measure.plot:
                measure.load("plot")(result, fig=page)
            elif hasattr(result, "records"):  # no figure of its own: its records as a table
                _records_table(page, result.records())
            pages.append(page)
    return pages


def _records_table(page: object, records: list[dict]) -> None:
    """Up to 30 records as a table under the caption (numbers to 4 significant digits)."""
    from posviz.report.layout import CONTENT_TOP, MARGIN_LEFT, MARGIN_RIGHT, draw_table

    if not records:
        return
    keys = list(records[0])

    def cell(v: object) -> str:
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    draw_table(page, (MARGIN_LEFT, CONTENT_TOP - 0.1, MARGIN_RIGHT - MARGIN_LEFT), keys,
               [[cell(r.get(k)) for k in keys] for r in records[:30]], col_widths=[1 / len(keys)] * len(keys))


def methods(ctx: ReportContext) -> list[Block]:
    """What each requested measure measures, in its own words."""
    from posviz.measures import get_measure

    blocks = []
    for name in ctx.options.measures:
        measure = get_measure(name)
        module = measure.request.partition(":")[0].rsplit(".", 1)[0] if measure.request else ""
        blocks.append(Block(f"{name} ({measure.origin})", (f"{measure.summary}. Defined in {module}; run on the report's "
                                                            "corpus in the same pass as the other text sections.",)))
    return blocks


SECTION = Section("measures", "Other measures on text", build, methods)
