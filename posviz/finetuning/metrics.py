"""GLUE's metrics, in percent: accuracy, F1, Matthews correlation, Pearson and Spearman correlations.

Computed with scikit-learn and scipy (not ``evaluate``, which fetches metric code
from the Hub at run time). Every value is × 100, as GLUE tables print them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

#: Metrics a task may ask for.
METRICS: tuple[str, ...] = ("accuracy", "f1", "matthews", "pearson", "spearman")


def _finite(x: float) -> float:
    # a constant prediction has no defined correlation: GLUE's scripts report 0 for it
    return 0.0 if not np.isfinite(x) else float(x)


def compute_metrics(names: Sequence[str], predictions: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """The named metrics of ``predictions`` against ``labels``, in percent.

    Parameters
    ----------
    names
        Metrics from :data:`METRICS`. ``f1`` is the F1 of class 1 (MRPC, QQP).
    predictions
        Class ids (classification) or real values (regression, for the correlations).
    labels
        The gold labels, same shape.

    Returns
    -------
    dict
        ``{name: value}`` in percent; an undefined correlation (constant
        predictions) is 0.
    """
    from scipy.stats import pearsonr, spearmanr
    from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

    predictions, labels = np.asarray(predictions), np.asarray(labels)
    out: dict[str, float] = {}
    for name in names:
        if name == "accuracy":
            value = accuracy_score(labels, predictions)
        elif name == "f1":
            value = f1_score(labels, predictions, pos_label=1, average="binary", zero_division=0.0)
        elif name == "matthews":
            value = matthews_corrcoef(labels, predictions)
        elif name in ("pearson", "spearman"):
            if np.ptp(predictions) == 0 or np.ptp(labels) == 0:
                value = 0.0
            else:
                value = (pearsonr if name == "pearson" else spearmanr)(predictions, labels)[0]
        else:
            raise ValueError(f"unknown metric {name!r}")
        out[name] = 100.0 * _finite(value)
    return out
