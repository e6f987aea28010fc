"""How scores are written in tables, footnotes and report pages.

Every table of posviz (the commands' text output and the PDF report) writes its
numbers with these functions, so that a score reads the same everywhere: a fixed
number of decimals, ``—`` for a value that is missing or not a number.
"""

from __future__ import annotations

#: Written for a missing value (``None``) or NaN.
MISSING = "—"

#: Each Toeplitzness variant in words (the key is ``exclude_diagonal``).
VARIANT_TEXT: dict[bool, str] = {False: "full (all n² entries)", True: "off-diagonal (main diagonal excluded)"}


def is_missing(x: float | None) -> bool:
    """True for ``None`` and NaN."""
    return x is None or x != x


def score(x: float | None, digits: int = 4, *, negative_zero: bool = False) -> str:
    """A score with ``digits`` decimals, or :data:`MISSING`.

    Parameters
    ----------
    x
        The value.
    digits
        Decimals written.
    negative_zero
        Keep the sign of a negative value that rounds to zero (``-0.000``: just
        below the null), as the per-head table does; by default it is written
        ``0.000``.

    Examples
    --------
    >>> score(0.123456), score(float("nan")), score(-0.00001, 3), score(-0.00001, 3, negative_zero=True)
    ('0.1235', '—', '0.000', '-0.000')
    """
    if is_missing(x):
        return MISSING
    if negative_zero:
        return f"{x:.{digits}f}"
    return f"{round(x, digits) + 0.0:.{digits}f}"  # + 0.0 turns -0.0 into 0.0


def mean_sd(mean: float | None, sd: float | None, digits: int = 4) -> str:
    """``mean ± sd`` (each written by :func:`score`)."""
    return f"{score(mean, digits)} ± {score(sd, digits)}"


def first_last(first: float | None, last: float | None, digits: int = 4, scale: float = 1.0) -> str:
    """``first → last`` (each times ``scale``), or :data:`MISSING` when both are missing."""
    if first is None and last is None:
        return MISSING
    a = None if first is None else first * scale
    b = None if last is None else last * scale
    return f"{score(a, digits)} → {score(b, digits)}"


def change(x: float, digits: int) -> str:
    """A signed difference, e.g. ``+0.3028``."""
    return f"{x:+.{digits}f}"
