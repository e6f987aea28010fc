"""Toeplitzness R^2 from diagonal sums, and the one choice of how to compute it.

Definitions (kept identical in code, docstrings and the report's methods page;
ARCHITECTURE.md collects them):

* offset ``k = j - i`` (key position minus query position);
* Toeplitz projection ``T(A)``: every diagonal replaced by its mean, the
  least-squares closest Toeplitz matrix (:mod:`posviz.toeplitz.projection`);
* Toeplitzness ``R^2 = 1 - sum((A - T(A))**2) / sum((A - mean(A))**2)`` over all
  ``n**2`` entries (``full``) or over the off-diagonal entries only
  (``exclude_diagonal``: the main diagonal is left out of both sums).

Two ways to evaluate it from :class:`~posviz.toeplitz.diagonals.DiagonalSums`:
the closed form ``sum(A**2) - sum_k S_k**2 / (n - |k|)`` (no matrix needed, but
it cancels when one part of ``A`` dwarfs the scored variation), and a second
pass over row blocks of ``A`` that sums squared deviations directly. Which one
is used is decided in one place, :func:`r2_method`; for large factored matrices
``auto`` takes the closed form only where its error bound
(:func:`closed_form_error`) is within :data:`ACCURACY`.
"""

from __future__ import annotations

import warnings
from typing import Literal

import numpy as np

from posviz.positional_scores import PosvizWarning
from posviz.toeplitz.diagonals import DiagonalSums, Rows

#: Factored matrices with ``n * n * r`` at most this are scored by the two-pass
#: row-block method (exact sums of squared deviations, a fraction of a second);
#: larger ones by the closed form, whose rounding error grows with
#: ``sum(A**2) / sum((A - mean)**2)``.
EXACT_LIMIT = 2e8

#: What ``auto`` promises (docs/definitions.md): R^2 within this of the dense computation,
#: absolute (R^2 lies in [0, 1], so a relative promise would mean nothing near 0).
ACCURACY = 1e-9

#: The closed form's rounding error in R^2 is at most about ``CLOSED_FORM_GROWTH * eps * kappa``,
#: ``kappa = sum(A**2) / sum((A - mean)**2)``: measured over 9,457 matrices (n <= 40, random,
#: near-constant and nearly rank-one factors, both variants) the largest ratio was 17.6; 64 leaves room
#: for larger n. So ``auto`` takes the closed form only for ``kappa <= ACCURACY / (64 eps)``, about 7e4.
CLOSED_FORM_GROWTH = 64.0

#: What a caller may ask for: ``auto`` lets :func:`r2_method` decide.
Method = Literal["auto", "closed", "exact"]
#: What is done: closed form, two passes over row blocks, the closed form where its error bound
#: allows and two passes elsewhere (``checked``, per matrix), or nothing to compute (offset stacks
#: are Toeplitz by construction, R^2 = 1).
R2Method = Literal["closed", "exact", "checked", "construction"]

#: How each :data:`R2Method` is described in outputs.
R2_METHOD_TEXT = {
    "closed": "closed form (FFT diagonal sums)",
    "exact": "two-pass over row blocks",
    "checked": "closed form (FFT diagonal sums); two-pass where ill-conditioned",
    "construction": "exact (Toeplitz by construction)",
}


def r2_method(form: str, n: int, rank: int | None, method: Method = "auto") -> R2Method:
    """Decide how R^2 of a matrix is computed (the one place this is decided).

    Parameters
    ----------
    form
        The stack's form: ``factored``, ``offsets`` or ``dense``.
    n
        Matrix size.
    rank
        Inner dimension ``r`` of the factors (ignored unless factored).
    method
        ``closed``: the closed form from diagonal sums (memory ``O(n r)``, never
        builds ``A``); ``exact``: a second pass over row blocks of ``A`` (``O(n^2 r)``
        time, ``O(n)`` rows of memory); ``auto``: ``exact`` for dense input and
        small factored problems (``n^2 r <= EXACT_LIMIT``), ``checked`` otherwise:
        the closed form for each matrix whose :func:`closed_form_error` is within
        :data:`ACCURACY`, the second pass for the others (near-constant matrices).

    Returns
    -------
    str
        ``construction`` for offset stacks whatever ``method`` (exactly Toeplitz,
        R^2 = 1), else ``closed``, ``exact`` or ``checked``.
    """
    if form == "offsets":
        return "construction"
    if method == "closed":
        return "closed"
    if method == "exact" or form == "dense":
        return "exact"
    return "exact" if n * n * rank <= EXACT_LIMIT else "checked"


def _sums_of_squares(ds: DiagonalSums, exclude_diagonal: bool) -> tuple[float, float]:
    """``(residual, total)`` sums of squares from diagonal statistics (the closed form's two terms)."""
    n = ds.n
    explained = ds.sums**2 / ds.counts  # sum over each diagonal of its mean squared
    if not exclude_diagonal:
        return ds.total_sq - explained.sum(), ds.total_sq - ds.total**2 / (n * n)
    if n < 2:
        raise ValueError("exclude_diagonal needs n >= 2")
    off_sq = ds.total_sq - ds.diag_sq
    resid = off_sq - (explained.sum() - explained[n - 1])
    return resid, off_sq - (ds.total - ds.sums[n - 1]) ** 2 / (n * n - n)


def closed_form_error(ds: DiagonalSums, *, exclude_diagonal: bool = False) -> float:
    """Bound on the closed form's rounding error in R^2 for this matrix.

    The closed form subtracts sums of the size of ``sum(A**2)`` to get the scored
    variation, so its error grows with ``kappa = sum(A**2) / sum((A - mean)**2)``;
    see :data:`CLOSED_FORM_GROWTH`. ``inf`` when the variation is not resolved at all.

    Parameters
    ----------
    ds
        The matrix's diagonal sums.
    exclude_diagonal
        For the off-diagonal variant (its own variation).
    """
    _, tot = _sums_of_squares(ds, exclude_diagonal)
    if not tot > 0:
        return float("inf")
    return CLOSED_FORM_GROWTH * np.finfo(float).eps * ds.total_sq / tot  # both variants start from sum(A**2)


def _r2(resid: float, tot: float, scale: float, what: str) -> float:
    if tot <= 1e-13 * max(scale, np.finfo(float).tiny):
        warnings.warn(
            f"{what} has zero variance (constant matrix); Toeplitzness set to 1.0",
            PosvizWarning,
            stacklevel=3,
        )
        return 1.0
    return float(1.0 - max(resid, 0.0) / tot)


def toeplitzness_from_sums(ds: DiagonalSums, *, exclude_diagonal: bool = False) -> float:
    """Toeplitzness R^2 from diagonal statistics (the closed form).

    Parameters
    ----------
    ds
        Output of a kernel of :mod:`posviz.toeplitz.diagonals`.
    exclude_diagonal
        Leave the main diagonal out of both sums.

    Returns
    -------
    float
        R^2; 1.0 (with a :class:`~posviz.positional_scores.PosvizWarning`) for zero variance.
    """
    resid, tot = _sums_of_squares(ds, exclude_diagonal)
    return _r2(resid, tot, ds.total_sq, "the off-diagonal part of the matrix" if exclude_diagonal else "the matrix")


def toeplitzness_from_rows(
    n: int, rows: Rows, ds: DiagonalSums, *, exclude_diagonal: bool = False, block: int = 256
) -> float:
    """Toeplitzness R^2 from the matrix's rows, summing squared deviations directly.

    Parameters
    ----------
    n
        Matrix size.
    rows
        ``rows(i0, i1) -> A[i0:i1] / ds.scale``, in the units of ``ds`` (so that
        huge inputs never overflow).
    ds
        The matrix's diagonal sums (for the diagonal means and the overall mean).
    exclude_diagonal
        Leave the main diagonal out of both sums.
    block
        Rows per block.

    Returns
    -------
    float
        R^2, as :func:`toeplitzness_from_sums`.

    Notes
    -----
    A second pass over ``A`` costs ``O(n^2)`` but avoids the cancellation of
    ``sum(A**2) - sum_k S_k**2 / m_k``, which matters when one part of the matrix
    (often its diagonal) dwarfs the variation that is scored.
    """
    if exclude_diagonal and n < 2:
        raise ValueError("exclude_diagonal needs n >= 2")
    means = ds.sums / ds.counts
    if exclude_diagonal:
        mu = (ds.total - ds.sums[n - 1]) / (n * n - n)
    else:
        mu = ds.total / (n * n)
    resid = tot = 0.0
    cols = np.arange(n)
    for i0 in range(0, n, block):
        i1 = min(n, i0 + block)
        blk = rows(i0, i1)
        idx = cols[None, :] - np.arange(i0, i1)[:, None] + n - 1
        dev = blk - means[idx]
        var = blk - mu
        if exclude_diagonal:
            r = np.arange(i1 - i0)
            dev[r, r + i0] = 0.0
            var[r, r + i0] = 0.0
        resid += float(np.sum(dev * dev))
        tot += float(np.sum(var * var))
    return _r2(resid, tot, ds.total_sq, "the off-diagonal part of the matrix" if exclude_diagonal else "the matrix")


def toeplitzness_of(ds: DiagonalSums, rows: Rows, how: R2Method, *, exclude_diagonal: bool = False) -> float:
    """R^2 of one matrix the way :func:`r2_method` decided.

    Parameters
    ----------
    ds
        The matrix's diagonal sums.
    rows
        Its rows in the units of ``ds`` (read only when ``how == "exact"``).
    how
        Output of :func:`r2_method`.
    exclude_diagonal
        Leave the main diagonal out of both sums.
    """
    if how == "construction":
        return 1.0
    if how == "checked" and closed_form_error(ds, exclude_diagonal=exclude_diagonal) > ACCURACY:
        how = "exact"  # near-constant: the closed form would cancel away the digits that are scored
    if how == "exact":
        return toeplitzness_from_rows(ds.n, rows, ds, exclude_diagonal=exclude_diagonal)
    return toeplitzness_from_sums(ds, exclude_diagonal=exclude_diagonal)
