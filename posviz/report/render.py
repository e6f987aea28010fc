"""Render a report to PDF: sections to pages (PdfPages), then outline and metadata (pypdf).

The file is written atomically: pages go to a temporary file beside the target,
which replaces the target only when complete, so an interrupted run (Ctrl-C, an
error in any section) leaves no partial PDF and an existing report untouched.
With ``SOURCE_DATE_EPOCH`` set the bytes depend only on the inputs.
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from posviz.report.context import ReportContext, source_date
from posviz.report.section import Section

# Vector text with TrueType (Type 42) fonts: searchable and extractable, unlike Type 3.
RC = {
    "pdf.fonttype": 42,
    "font.family": "DejaVu Sans",
    "axes.titlesize": 9,
    "axes.labelsize": 9,
    "savefig.dpi": 150,  # resolution of the rasterised heatmaps
    "image.resample": True,
}


@dataclass
class _Entry:
    title: str
    page: int  # 0-based index of the section's first page (title pages included)
    children: list[tuple[str, int]] = field(default_factory=list)


def render_report(ctx: ReportContext, path: str | os.PathLike, sections: Sequence[Section] | None = None) -> Path:
    """Draw every section and write the PDF atomically.

    Parameters
    ----------
    ctx
        Loaded inputs and options.
    path
        Target ``.pdf`` file (replaced only when the report is complete).
    sections
        Sections in page order; default :func:`posviz.report.sections.sections` (the registry's, in its order).

    Returns
    -------
    Path
        ``path``.
    """
    import matplotlib
    from matplotlib.backends.backend_pdf import PdfPages

    from posviz.report.layout import add_footer
    from posviz.report.sections import sections as all_sections
    from posviz.report.sections import title
    from posviz.util.atomic import atomic_path

    sections = all_sections() if sections is None else sections
    path = Path(path)
    n_title = title.page_count(ctx)
    footer = f"posviz {ctx.version} · {ctx.date} · {_short(ctx.title, 90)}"
    entries: list[_Entry] = []
    ctx.sections = list(sections)  # what the methods page may describe
    ctx.included.clear()  # filled below with the sections that produce pages
    ctx.notes.clear()  # and with the title-page notes of sections left out
    with matplotlib.rc_context(RC), atomic_path(path) as tmp:
        # Sections are drawn and written one at a time (memory stays that of one section);
        # the title page comes last because it lists them, and is moved to the front below.
        with PdfPages(tmp) as pdf:
            page = n_title
            for section in sections:
                figures = section.build(ctx)
                if not figures:
                    continue
                ctx.included.append(section.key)
                entry = _Entry(section.title, page)
                for fig in figures:
                    if fig.get_label():
                        entry.children.append((fig.get_label(), page))
                    add_footer(fig, footer, page + 1)
                    pdf.savefig(fig)
                    page += 1
                entries.append(entry)
            if not entries:
                from posviz.errors import PosvizError

                labels = ", ".join(it.label for it in ctx.items)
                notes = "; ".join(f"{it.label}: {it.note}" for it in ctx.items if it.note)
                raise PosvizError(f"nothing to report for {labels}" + (f" ({notes})" if notes else ""),
                                  "use `posviz heads MODEL` for models without learned absolute positions")
            contents = [title.ContentsEntry(e.title, e.page + 1) for e in entries]
            title_pages = title.build(ctx, contents)
            if len(title_pages) != n_title:
                raise RuntimeError(f"title pages: expected {n_title}, drew {len(title_pages)}")
            for i, fig in enumerate(title_pages):
                add_footer(fig, footer, i + 1)
                pdf.savefig(fig)
        _finish(tmp, ctx, entries, n_title)
    return path


def _finish(tmp: Path, ctx: ReportContext, entries: list[_Entry], n_title: int) -> None:
    """Put the title pages first, add the outline and the document information."""
    from pypdf import PdfReader, PdfWriter

    reader = PdfReader(io.BytesIO(tmp.read_bytes()))
    total = len(reader.pages)
    writer = PdfWriter()
    writer.append(reader, pages=list(range(total - n_title, total)) + list(range(total - n_title)), import_outline=False)
    writer.add_outline_item(title="Title page", page_number=0)
    for entry in entries:
        parent = writer.add_outline_item(title=entry.title, page_number=entry.page, is_open=False)
        for label, page in entry.children:
            writer.add_outline_item(title=label, page_number=page, parent=parent)
    writer.page_mode = "/UseOutlines"
    writer.add_metadata(metadata(ctx))
    with open(tmp, "wb") as fh:
        writer.write(fh)


def metadata(ctx: ReportContext) -> dict[str, str]:
    """PDF document information: title, subject, keywords (model ids), creator, dates."""
    import matplotlib
    import pypdf

    stamp = source_date().strftime("D:%Y%m%d%H%M%SZ")
    models = [it.label for it in ctx.items]
    return {
        "/Title": ctx.title,
        "/Subject": "Positional analysis (P = E Eᵀ, Toeplitzness) of " + ", ".join(models),
        "/Keywords": ", ".join([*models, "position embeddings", "Toeplitzness", "posviz"]),
        "/Creator": f"posviz {ctx.version}",
        "/Producer": f"posviz {ctx.version} (matplotlib {matplotlib.__version__}, pypdf {pypdf.__version__})",
        "/CreationDate": stamp,
        "/ModDate": stamp,
    }


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
