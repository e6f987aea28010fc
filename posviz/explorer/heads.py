"""The Heads tab's numbers: every chosen layer's position-only map of every head, its scores and profile.

Maps travel in the form the stack has (:class:`~posviz.positional_scores.PositionalScores`):
factored heads as their factors ``Q_h``, ``K_h`` (``n x r``; the browser multiplies
them, so a 512-position head costs ``2 n r`` numbers instead of ``n²``), offset heads
(T5, ALiBi, RoPE probe profiles) as ``f_h(k)``, dense heads block-averaged. Factors
are float32 while the whole tab fits :data:`F4_BUDGET`, else float16 (about three
significant digits, which the page says); beyond :data:`MAX_BYTES` they are
block-averaged too, which is exact for block means (``mean(q_I) · mean(k_J)``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from posviz.explorer.arrays import encode_array
from posviz.explorer.embeddings import finite_or_none
from posviz.extract.registry import open_heads
from posviz.scoring.layers import LayerTable, first_position, parse_layers, scan_layers

#: Raw bytes of factors under which they are stored as float32.
F4_BUDGET = 4 * 2**20
#: Raw bytes of factors above which they are block-averaged (stored as float16).
MAX_BYTES = 6 * 2**20
#: Side of a dense head's stored map (dense stacks are rare: TUPE's untied term).
DENSE_SIDE = 256
#: Per-head fields of the scores table, in order (RoPE fields are added where the source gives them).
HEAD_FIELDS = ("toeplitzness_offdiag", "null_mean_offdiag", "excess_offdiag", "toeplitzness", "null_mean", "excess",
               "peak_offset", "f_hat_0")
ROPE_FIELDS = ("dominant_band", "dominant_wavelength", "high_share", "locality")


def factor_plan(layers: int, heads: int, n: int, rank: int) -> tuple[str, int]:
    """The dtype (``f4`` or ``f2``) and the number of rows (``n`` or fewer blocks) of the stored factors."""
    per_row = layers * heads * 2 * rank
    if per_row * n * 4 <= F4_BUDGET:
        return "f4", n
    m = n
    while m > 16 and per_row * m * 2 > MAX_BYTES:
        m //= 2
    return "f2", m


def _pool_rows(x: np.ndarray, m: int) -> np.ndarray:
    """Block means of the rows of ``(heads, n, r)`` factors over ``m`` blocks (the edges of ``pooled``)."""
    n = x.shape[1]
    edges = np.linspace(0, n, m + 1).round().astype(int)
    return np.add.reduceat(x, edges[:-1], axis=1) / np.diff(edges)[None, :, None]


def _maps(stack, plan: tuple[str, int] | None) -> dict[str, Any]:
    """One layer's maps in the stack's own form."""
    if stack.form == "factored":
        dtype, m = plan
        left, right = (stack.left, stack.right) if m == stack.n else (_pool_rows(stack.left, m), _pool_rows(stack.right, m))
        return {"form": "factored", "rows": m, "left": encode_array(left, dtype), "right": encode_array(right, dtype)}
    if stack.form == "offsets":
        return {"form": "offsets", "rows": stack.n, "offsets": encode_array(stack.offsets)}
    pooled, _ = stack.pooled(DENSE_SIDE)
    return {"form": "dense", "rows": pooled.shape[1], "dense": encode_array(pooled)}


def _rows(table: LayerTable) -> list[dict[str, Any]]:
    """The per-head fields the page tabulates, JSON-ready."""
    out = []
    for r in table.rows():
        row: dict[str, Any] = {"layer": r["layer"], "head": r["head"]}
        for f in (*HEAD_FIELDS, *ROPE_FIELDS):
            if f in r:
                row[f] = r[f] if isinstance(r[f], int) else finite_or_none(r[f])
        out.append(row)
    return out


def heads_view(model: str, *, layers: str = "all", positions: str | None = None, table: str | None = None,
               ln: str = "ln", bias: bool = True, progress: bool = False) -> dict[str, Any]:
    """What the Heads tab shows for one model.

    Parameters
    ----------
    model
        Model folder, weight file, hub id or run (:func:`posviz.extract.registry.open_heads`).
    layers
        ``all`` or a list like ``0,2,5-7``.
    positions, table, ln, bias
        As in ``posviz heads``.
    progress
        A progress bar over layers on stderr.

    Returns
    -------
    dict
        JSON-ready: ``layers`` (per layer: maps, offset profiles, conventions line, RoPE band energy),
        ``rows`` (one per layer and head), counts, ``first_position`` and the source's ``metadata``.

    Raises
    ------
    PosvizError
        As :func:`~posviz.extract.registry.open_heads` and :func:`~posviz.scoring.layers.parse_layers` do.
    """
    heads = open_heads(model, ln=ln, bias=bias, positions=positions, table=table)
    scanned = LayerTable(heads.metadata())
    chosen = parse_layers(None, layers, heads.num_layers, scanned.metadata["model"])
    plan, out_layers = None, []
    for scored in scan_layers(heads, chosen, keep=chosen, progress_label="layer" if progress else None):
        scanned.add(scored)
        stack = scored.stack
        if stack.form == "factored" and plan is None:
            plan = factor_plan(len(chosen), stack.heads, stack.n, stack.rank)
        entry = {"layer": scored.layer, "conventions": scored.convention_line, "causal": scored.causal,
                 "profiles": encode_array(np.atleast_2d(scored.scores.profiles)), **_maps(stack, plan)}
        bands = scored.conventions.get("per_head", {}).get("band_energy")
        if bands is not None:
            entry["bands"] = {"energy": encode_array(np.asarray(bands, dtype=float)),
                              "wavelength": [float(w) for w in scored.conventions.get("band_wavelength", [])]}
        out_layers.append(entry)
    meta = {k: v for k, v in scanned.metadata.items() if isinstance(v, (str, int, float, bool, list)) or v is None}
    return {
        "model": scanned.metadata["model"],
        "scheme": scanned.metadata.get("scheme", ""),
        "num_layers": heads.num_layers,
        "num_heads": heads.num_heads,
        "n": heads.n,
        "first_position": first_position(heads),
        "precision": {"f4": "float32", "f2": "float16 (about 3 significant digits)"}.get(plan[0] if plan else "f4"),
        "pooled": bool(plan and plan[1] < heads.n),
        "conventions": scanned.convention_line,
        "layers": out_layers,
        "rows": _rows(scanned),
        "metadata": meta,
    }
