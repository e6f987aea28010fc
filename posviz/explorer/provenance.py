"""The explorer's sidebar: the conventions every number follows, and what made the page.

The page states its conventions once, in words that match docs/definitions.md, and
names the posviz version and the libraries that drew it, so that a saved file says
how to reproduce it. No clock time is written: the same inputs give the same file.
"""

from __future__ import annotations

from typing import Any

from posviz.toeplitz.headline import VARIANT_SHORT

#: The conventions, one item a line (docs/definitions.md has them in full).
CONVENTIONS = (
    "Rows are query positions i, columns key positions j; the offset is k = j − i.",
    "P = E_P E_Pᵀ, the Gram matrix of the position embeddings as stored (no normalisation).",
    "f̂(k) is the mean of P along the diagonal at offset k; the Toeplitz projection T(P) puts f̂(j − i) in every cell, "
    "the residual is P − T(P).",
    f"Toeplitzness is the R² of P against T(P); the headline is the {VARIANT_SHORT[True]} (main diagonal left out of "
    f"both sums); the {VARIANT_SHORT[False]} over all n² entries is shown beside it.",
    "Null: the same R² with the rows of E_P permuted, its exact mean over all permutations (closed form); "
    "excess = (R² − null) / (1 − null).",
    "Heads: the position-only logits of each head, (X W_Q + b_Q)(X W_K + b_K)ᵀ / √d_h with X the position part "
    "after the LayerNorm(s) before attention (absolute models); relative schemes give f_h(j − i) directly.",
    "Peak offset: the k with |k| ≤ n/2 where f̂(k) is largest.",
)


def library_versions() -> dict[str, str]:
    """Versions of posviz and of numpy, which computed the page's numbers (``unknown`` where not installed).

    The page draws with its own copy of plotly.js (the sidebar names that version); the plotly Python package
    plays no part, so its version, or its absence, is not listed.
    """
    from posviz import __version__
    from posviz.util.provenance import installed_versions

    return {"posviz": __version__, **installed_versions(["numpy"])}


def sidebar(plotly_js_version: str) -> dict[str, Any]:
    """The sidebar's data: conventions, versions and where to read more."""
    return {
        "conventions": list(CONVENTIONS),
        "versions": {**library_versions(), "plotly.js": plotly_js_version},
        "docs": "docs/explore.md, docs/definitions.md and docs/toeplitzness.md in the posviz repository",
    }
