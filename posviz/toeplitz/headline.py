"""Which Toeplitzness variant posviz puts first (the headline), and why.

posviz computes two variants of Toeplitzness, the R² of a matrix against its
Toeplitz projection: ``full`` (all ``n**2`` entries) and ``exclude_diagonal``
(the main diagonal left out of both sums), each with its row-permutation null
and the excess over it. Every variant stays in every output; the headline is
the one tables print first, titles and summaries quote and figures put on
their axes. It is the **off-diagonal R²**, because it is the one that measures
translation invariance beyond what any set of vectors shows:

* The diagonal of a Gram matrix ``P = E Eᵀ`` holds the squared norms, which
  stand far above the off-diagonal entries for any set of vectors: the diagonal
  alone makes ``P`` look Toeplitz-like. Gaussian noise 512 × 384 scores a full
  R² of 0.429, exactly its null (0.429); its off-diagonal R² is 0.0037, at its
  null (0.0038).
* While a model learns, the full R² can stay flat while translation invariance
  grows, because its null falls as the diagonal stops dominating. A tiny model
  trained 4000 steps on 2 CPU cores (``posviz train --scheme absolute``): full
  R² 0.340 → 0.375, off-diagonal R² 0.017 → 0.467, while the held-out accuracy
  rose 0 → 0.154.
* Where the diagonal does not dominate the two agree: all-MiniLM-L6-v2 scores
  0.474 full and 0.477 off-diagonal; a sinusoidal table 1.000 in both.

The off-diagonal R² needs no sampling, is defined for every stack (relative
schemes included, where no null applies) and its null is near 0 for position
tables of useful length, so its value reads directly as translation invariance
beyond chance; the excess over the null, printed beside it, says so exactly.
"""

from __future__ import annotations

#: ``exclude_diagonal`` of the headline variant (the default of every command).
HEADLINE_EXCLUDE_DIAGONAL = True

#: Short names of the variants, keyed by ``exclude_diagonal`` (column heads, axis labels).
VARIANT_SHORT: dict[bool, str] = {False: "full R²", True: "off-diagonal R²"}


def variant_name(exclude_diagonal: bool) -> str:
    """The variant's name in JSON and CSV output (``variant``): ``full`` or ``exclude_diagonal``."""
    return "exclude_diagonal" if exclude_diagonal else "full"


def field_suffix(exclude_diagonal: bool) -> str:
    """The suffix of the variant's fields: ``""`` (full) or ``"_offdiag"``."""
    return "_offdiag" if exclude_diagonal else ""


def headline_field(exclude_diagonal: bool = HEADLINE_EXCLUDE_DIAGONAL) -> str:
    """The output field of the headline R² (``toeplitzness_offdiag`` by default, ``toeplitzness`` for full)."""
    return "toeplitzness" + field_suffix(exclude_diagonal)
