"""The norms of a model's position table E_P, as a posviz measure: how large the position vectors grow along
training, and whether the far positions stay as large as the near ones.

Installed, it is one more measure of posviz: ``posviz measures`` lists it, ``posviz trajectory RUN --measure
table-norm`` runs it along a checkpoint series (with posviz's series checks, table and figure), and
``posviz --help`` names it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from posviz.measures import Measure


def point(source: str, options: Any) -> dict[str, float]:
    """The norms of one checkpoint's E_P (``options``: posviz's series options; this measure uses ``positions``)."""
    import posviz

    e = posviz.load_position_embeddings(source, positions=options.positions)
    norms = np.linalg.norm(np.asarray(e.matrix, dtype=np.float64), axis=1)
    tenth = max(1, len(norms) // 10)
    return {"mean_norm": float(norms.mean()), "max_norm": float(norms.max()),
            "far_to_near": float(norms[-tenth:].mean() / norms[:tenth].mean())}


MEASURE = Measure(
    "table-norm", "Norms of the position vectors: mean and largest, and the last tenth's mean over the first tenth's",
    needs="weights", reads=("position table",), options=frozenset({"positions"}), point="posviz_norms:point",
    columns=(("mean_norm", "mean norm"), ("max_norm", "max norm"), ("far_to_near", "far / near")),
)
