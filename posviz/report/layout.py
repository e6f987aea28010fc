"""Page layout shared by the report sections: page size, headers, tables, flowing text.

All pages are A4 landscape figures built without pyplot. Text is drawn as text
(vector, searchable); positions are in figure fractions.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

PAGE_SIZE: tuple[float, float] = (11.69, 8.27)  # A4 landscape, inches
MARGIN_LEFT, MARGIN_RIGHT = 0.06, 0.96  # figure fractions
CONTENT_TOP, CONTENT_BOTTOM = 0.84, 0.09
TITLE_SIZE, SUBTITLE_SIZE, BODY_SIZE, SMALL_SIZE = 17, 10.5, 9.5, 8
HEADER_GREY = "#e8e8e8"


def new_page(title: str, subtitle: str | None = None, *, bookmark: str | None = None):
    """An empty report page with its header.

    Parameters
    ----------
    title
        Page heading (the section title, so it can be searched and extracted).
    subtitle
        One line under the heading.
    bookmark
        Label of this page in the PDF outline, under its section (e.g. a model name).

    Returns
    -------
    matplotlib.figure.Figure
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=PAGE_SIZE)
    FigureCanvasAgg(fig)
    size, title = fit_text(title, MARGIN_RIGHT - MARGIN_LEFT, TITLE_SIZE, min_size=12, weight="bold")
    fig.text(MARGIN_LEFT, 0.935, title, fontsize=size, fontweight="bold", va="baseline")
    if subtitle:
        fig.text(MARGIN_LEFT, 0.895, subtitle, fontsize=SUBTITLE_SIZE, color="0.25", va="baseline")
    fig.add_artist(_rule(0.875))
    if bookmark:
        fig.set_label(bookmark)
    return fig


def captioned_page(title: str, subtitle: str, bookmark: str, caption: str):
    """A report page with a caption under its title, its content area laid out by matplotlib's constrained engine."""
    fig = new_page(title, subtitle, bookmark=bookmark)
    text = "\n".join(wrap_text(caption, MARGIN_RIGHT - MARGIN_LEFT, SMALL_SIZE))
    fig.text(MARGIN_LEFT, CONTENT_TOP + 0.005, text, fontsize=SMALL_SIZE, color="0.25", va="top", linespacing=1.4)
    lines = text.count("\n") + 1
    top = CONTENT_TOP - 0.02 * lines - 0.01
    fig.set_layout_engine(
        "constrained", rect=(MARGIN_LEFT, CONTENT_BOTTOM, MARGIN_RIGHT - MARGIN_LEFT, top - CONTENT_BOTTOM)
    )
    return fig


def add_footer(fig, left: str, page: int) -> None:
    """Footer line: report name on the left, page number on the right."""
    fig.add_artist(_rule(0.055, color="0.75"))
    fig.text(MARGIN_LEFT, 0.03, left, fontsize=SMALL_SIZE, color="0.35", va="baseline")
    fig.text(MARGIN_RIGHT, 0.03, f"page {page}", fontsize=SMALL_SIZE, color="0.35", ha="right", va="baseline")


def _rule(y: float, color: str = "0.2"):
    from matplotlib.lines import Line2D

    return Line2D([MARGIN_LEFT, MARGIN_RIGHT], [y, y], lw=0.6, color=color)


def line_height(fontsize: float, spacing: float = 1.4) -> float:
    """Height of one text line in figure fractions."""
    return fontsize * spacing / 72.0 / PAGE_SIZE[1]


@functools.lru_cache(maxsize=65536)  # wrapping measures the same words and prefixes many times
def text_width(text: str, fontsize: float, weight: str = "normal") -> float:
    """Width of one line of text in figure fractions, measured with the font's real metrics."""
    from matplotlib.font_manager import FontProperties

    renderer = _measuring_renderer()
    width, _, _ = renderer.get_text_width_height_descent(text, FontProperties(size=fontsize, weight=weight), ismath=False)
    return width / _MEASURE_DPI / PAGE_SIZE[0]


_MEASURE_DPI = 720  # high resolution: hinting at low dpi would overstate widths


@functools.cache
def _measuring_renderer():
    from matplotlib.backends.backend_agg import RendererAgg

    return RendererAgg(10, 10, _MEASURE_DPI)


def fit_text(text: str, width: float, size: float, *, min_size: float, weight: str = "normal") -> tuple[float, str]:
    """Font size (shrunk down to ``min_size``) and text (cut with "…" if still too long) that fit ``width``."""
    while size > min_size and text_width(text, size, weight) > width:
        size -= 0.5
    current = text_width(text, size, weight)
    if current > width:  # jump close to the right length, then trim character by character
        text = text[: max(1, int(len(text) * width / current))] + "…"
    while len(text) > 1 and text_width(text, size, weight) > width:
        text = text[:-2] + "…"
    return size, text


_OPERATORS = frozenset({"=", "−", "-", "+", "×", "/", "±", "·", "≈", "→"})


def wrap_text(text: str, width: float, fontsize: float, weight: str = "normal") -> list[str]:
    """Greedy word wrap of ``text`` to ``width`` (figure fractions) using real glyph widths."""
    units: list[str] = []
    words = text.split(" ")
    glue = False
    for word in words:
        if not word:
            continue
        # keep formulas such as "k = j − i" or "512 × 384" on one line
        if units and (glue or word in _OPERATORS):
            units[-1] += " " + word
        else:
            units.append(word)
        glue = word in _OPERATORS or units[-1].count("[") > units[-1].count("]")  # nor an index like F[i, j]
    # Line widths are sums of (cached) word widths: kerning across spaces is negligible.
    space = text_width("a a", fontsize, weight) - text_width("aa", fontsize, weight)
    lines: list[str] = []
    used = 0.0
    for word in (piece for unit in units for piece in _split_long(unit, width, fontsize, weight)):
        w = text_width(word, fontsize, weight)
        if lines and used + space + w <= width:
            lines[-1] = f"{lines[-1]} {word}"
            used += space + w
        else:
            lines.append(word)
            used = w
    return lines


def _split_long(word: str, width: float, fontsize: float, weight: str) -> list[str]:
    """A word wider than ``width`` (a long tensor name or path) cut into pieces that fit, after ``.``, ``/`` or ``_`` where possible."""
    import re

    if text_width(word, fontsize, weight) <= width:
        return [word]
    pieces = [""]
    for token in re.findall(r"[^./_]*[./_]?", word):
        if not token:
            continue
        if pieces[-1] and text_width(pieces[-1] + token, fontsize, weight) > width:
            pieces.append("")
        pieces[-1] += token
        while len(pieces[-1]) > 1 and text_width(pieces[-1], fontsize, weight) > width:  # a token longer than a line
            lo, hi = 1, len(pieces[-1]) - 1  # the longest prefix that fits (at least one character)
            while lo < hi:
                mid = (lo + hi + 1) // 2
                lo, hi = (mid, hi) if text_width(pieces[-1][:mid], fontsize, weight) <= width else (lo, mid - 1)
            pieces[-1:] = [pieces[-1][:lo], pieces[-1][lo:]]
    return pieces


def row_height(lines: int, fontsize: float) -> float:
    """Height of a table row with ``lines`` lines of text, in figure fractions."""
    return fontsize * (0.9 + 1.25 * lines) / 72.0 / PAGE_SIZE[1]


def wrap_label(text: str, width: int, max_lines: int = 2) -> str:
    """Wrap a model id or path for a table cell, breaking after ``/`` where possible.

    Examples
    --------
    >>> wrap_label("sentence-transformers/all-MiniLM-L6-v2", 24)
    'sentence-transformers/\\nall-MiniLM-L6-v2'
    """
    import re

    lines = [""]
    for token in re.findall(r"[^/\s]*(?:/|\s+|$)", text):
        if not token:
            continue
        if lines[-1] and len(lines[-1]) + len(token.rstrip()) > width:
            lines.append("")
        lines[-1] += token.lstrip() if not lines[-1] else token
        while len(lines[-1]) > width:  # a single token longer than a line: break it hard
            lines[-1:] = [lines[-1][:width], lines[-1][width:]]
    lines = [x.rstrip() for x in lines if x.strip()]
    if len(lines) > max_lines:
        lines = lines[: max_lines - 1] + ["…" + "".join(lines[max_lines - 1 :])[-(width - 1) :]]
    return "\n".join(lines)


def draw_table(
    fig,
    rect: tuple[float, float, float],
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    col_widths: Sequence[float],
    align: Sequence[str] | None = None,
    fontsize: float = BODY_SIZE,
    pad: float = 0.02,
) -> float:
    """Draw a real table (ruled cells, shaded bold header) on a page.

    Parameters
    ----------
    fig
        The page.
    rect
        ``(left, top, width)`` in figure fractions; the height follows from the rows.
    header
        Column headings (may contain ``\\n``).
    rows
        Cell texts, one sequence per row; a cell may span several lines.
    col_widths
        Column widths as fractions of ``width`` (summing to 1).
    align
        ``left``, ``center`` or ``right`` per column (default: first left, rest right).
    fontsize
        Cell font size (fixed: matplotlib's auto-shrinking is turned off).
    pad
        Horizontal padding inside cells, as a fraction of the cell width.

    Returns
    -------
    float
        The bottom of the table, in figure fractions.
    """
    from matplotlib.table import Table

    left, top, width = rect
    align = list(align or ["left"] + ["right"] * (len(header) - 1))
    heights = [row_height(max(str(c).count("\n") + 1 for c in cells), fontsize) for cells in [header, *rows]]
    total = sum(heights)
    ax = fig.add_axes((left, top - total, width, total))
    ax.set_axis_off()
    table = Table(ax, loc="upper left")
    table.AXESPAD = 0.0  # flush with the axes, which are exactly the table's size
    for r, (cells, height) in enumerate(zip([header, *rows], heights, strict=True)):
        for col, text in enumerate(cells):
            # every cell of a row gets the row's height (matplotlib sizes cells one by one)
            cell = table.add_cell(r, col, col_widths[col], height / total, text=str(text), loc=align[col],
                                  facecolor=HEADER_GREY if r == 0 else "white")
            cell.set_edgecolor("0.55")
            cell.set_linewidth(0.5)
            cell.PAD = pad
            if r == 0:
                cell.get_text().set_fontweight("bold")
    table.auto_set_font_size(False)
    table.set_fontsize(fontsize)
    ax.add_table(table)
    return top - total


@dataclass(frozen=True)
class Block:
    """A piece of flowing text: an optional heading, paragraphs, and display formulas.

    Attributes
    ----------
    heading
        Bold heading, or ``None``.
    paragraphs
        Plain-text paragraphs (wrapped to the column width).
    formulas
        Mathtext lines (``$...$``) drawn centred after the paragraphs.
    """

    heading: str | None
    paragraphs: tuple[str, ...] = ()
    formulas: tuple[str, ...] = ()


def flow_blocks(
    blocks: Sequence[Block],
    make_page,
    *,
    columns: int = 2,
    top: float = CONTENT_TOP,
    bottom: float = CONTENT_BOTTOM,
    fontsize: float = BODY_SIZE,
    gutter: float = 0.04,
    left: float = MARGIN_LEFT,
    right: float = MARGIN_RIGHT,
) -> list:
    """Lay blocks out in columns, starting new pages as needed.

    Parameters
    ----------
    blocks
        Text blocks in reading order.
    make_page
        ``make_page(index) -> Figure``: a fresh page with its header.
    columns
        Text columns per page.
    top, bottom
        Vertical extent of the text area (figure fractions).
    fontsize
        Body font size.
    gutter
        Space between columns (figure fraction).
    left, right
        Horizontal extent of the text area (figure fractions).

    Returns
    -------
    list of matplotlib.figure.Figure
    """
    width = (right - left - gutter * (columns - 1)) / columns
    lh = line_height(fontsize)
    pages = [make_page(0)]
    col, y = 0, top

    def room(height: float) -> None:
        nonlocal col, y
        if y - height >= bottom or y == top:
            return
        col += 1
        y = top
        if col == columns:
            pages.append(make_page(len(pages)))
            col = 0

    for block in blocks:
        lines = [wrap_text(p, width, fontsize) for p in block.paragraphs]
        need = (lh * 1.5 if block.heading else 0) + sum(len(x) + 0.5 for x in lines) * lh + len(block.formulas) * lh * 2.2
        room(min(need, top - bottom))
        x = left + col * (width + gutter)
        if block.heading:
            pages[-1].text(x, y, block.heading, fontsize=fontsize + 1.5, fontweight="bold", va="top")
            y -= lh * 1.5
        for para in lines:
            while para:  # a paragraph longer than the space left continues in the next column
                room(lh * min(len(para), 3))  # no column starts or ends with fewer than 3 lines of it
                fit = max(1, int((y - bottom) / lh + 1e-9))
                chunk, para = para[:fit], para[fit:]
                x = left + col * (width + gutter)
                pages[-1].text(x, y, "\n".join(chunk), fontsize=fontsize, va="top", linespacing=1.4)
                y -= lh * len(chunk)
            y -= lh * 0.5
        for formula in block.formulas:
            room(lh * 2.2)
            x = left + col * (width + gutter)
            pages[-1].text(x + width / 2, y - lh * 0.3, formula, fontsize=fontsize + 1, ha="center", va="top")
            y -= lh * 2.2
        y -= lh * 0.6
    return pages
