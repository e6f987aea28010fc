"""The Series tab's numbers: P and its Toeplitzness at every kept checkpoint of a ``posviz train`` run.

The checkpoints are those ``posviz trajectory RUN`` scores (:func:`posviz.series.points.series_points`:
every complete checkpoint, by step); each one's E_P is read and scored by the engine
(exact null mean, no draws), and its P stored block-averaged to a side that keeps the
tab small however many checkpoints there are.
"""

from __future__ import annotations

from typing import Any

from posviz.explorer.arrays import encode_array
from posviz.explorer.embeddings import SCORE_FIELDS, finite_or_none
from posviz.positional_scores import PositionalScores
from posviz.read.embeddings import load_position_embeddings
from posviz.series.points import series_points
from posviz.toeplitz.engine import score_embeddings

#: Numbers of a series' stored maps in all (side² per checkpoint): about 1.3 MB of float32.
SERIES_CELLS = 2**18


def series_view(run: str, *, positions: str | None = None, max_side: int = 128) -> dict[str, Any]:
    """What the Series tab shows for one run folder.

    Parameters
    ----------
    run
        A ``posviz train`` run folder.
    positions
        ``A:B`` positions to keep.
    max_side
        Largest side of a stored map (smaller for long series).

    Returns
    -------
    dict
        JSON-ready: ``steps``, per-step ``scores`` and block-averaged ``maps``, block ``edges``.

    Raises
    ------
    PosvizError
        A run without a complete checkpoint, or whose model has no position table.
    """
    points = series_points([run])
    side = max(16, min(max_side, int((SERIES_CELLS / len(points)) ** 0.5)))
    steps, scores, maps, edges = [], [], [], None
    for point in points:
        pe = load_position_embeddings(point.spec, positions=positions)
        s = score_embeddings(pe.matrix, null_draws=1)  # one draw: the exact null mean, no spread
        pooled, edges = PositionalScores.from_embeddings(pe.matrix).pooled(side)
        steps.append(point.step)
        scores.append({f: finite_or_none(getattr(s, f)) for f in SCORE_FIELDS})
        maps.append(encode_array(pooled[0]))
    return {"run": points[0].series, "steps": steps, "scores": scores, "maps": maps,
            "edges": [int(e) for e in edges], "n": int(edges[-1])}
