"""Toeplitzness against benchmark performance (the TISA paper's Figure 2).

:func:`toeplitzness_vs_performance` scores the eight ALBERT v1/v2 checkpoints (or a
subset) and any extra models, pairs each with a benchmark value (the bundled
ALBERT table from :mod:`posviz.reference`, or a value given for an extra model),
and returns a :class:`PerformanceComparison`: the table, the null band and one
arrow v1 -> v2 per size. :func:`posviz.plots.scatter.plot_toeplitzness_vs_metric`
draws it; training runs' paths come from :mod:`posviz.series.runs`.
See ARCHITECTURE.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from posviz.errors import OptionError
from posviz.reference import METRICS, Metric
from posviz.scoring.batch import MissingModelsError, ModelRequest, score_models
from posviz.scoring.cache import ScoreCache, ScoreSettings
from posviz.toeplitz.headline import HEADLINE_EXCLUDE_DIAGONAL
from posviz.util.format import change

if TYPE_CHECKING:
    import pandas as pd


def parse_score_options(items: Sequence[str] | None) -> dict[str, float]:
    """Parse ``MODEL=VALUE`` strings (``--score``) into ``{model: value}``.

    The last ``=`` separates the value, so model paths may contain ``=``.

    Raises
    ------
    OptionError
        For a missing ``=``, an empty model, a value that is not a finite number,
        or the same model given twice.
    """
    out: dict[str, float] = {}
    for item in items or ():
        model, sep, value = item.rpartition("=")
        if not sep or not model.strip():
            raise OptionError(f"--score {item!r} is not of the form MODEL=VALUE", "for example --score ./my-model=81.5")
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not math.isfinite(number):
            raise OptionError(f"--score {item!r}: {value!r} is not a finite number")
        if model in out:
            raise OptionError(f"--score gives {model} twice")
        out[model] = number
    return out


def _reference_row(spec: str, table: pd.DataFrame) -> int | None:
    """Row of the ALBERT table that ``spec`` names (canonical id or alias), if any."""
    base = spec.partition("@")[0].lower()
    for i, row in table.iterrows():
        if base in (row["hub_id"].lower(), row["alias"].lower()):
            return int(i)
    return None


def _split_models(models: Sequence[str], scores: Mapping[str, float], table: pd.DataFrame, metric: str) -> tuple[list[int], list[str]]:
    """Rows of the ALBERT table to show (default all) and the extra models, in order.

    Raises
    ------
    OptionError
        For a ``--score`` on an ALBERT checkpoint, or an extra model without one.
    """
    chosen: list[int] = []
    extras: list[str] = []
    for spec in models:
        row = _reference_row(spec, table)
        if row is None:
            if spec not in extras:
                extras.append(spec)
        elif row not in chosen:
            chosen.append(row)
    for spec in scores:
        if _reference_row(spec, table) is not None:
            raise OptionError(f"--score {spec}: the value of an ALBERT reference checkpoint comes from the bundled table", "use --score for other models only")
        if spec not in extras:
            extras.append(spec)
    lacking = [m for m in extras if m not in scores]
    if lacking:
        raise OptionError(f"no {metric} value for {', '.join(lacking)}", f"give one with --score {lacking[0]}=VALUE")
    return (chosen or list(range(len(table)))), extras


@dataclass
class PerformanceComparison:
    """Toeplitzness and benchmark values of the models on one plot.

    Attributes
    ----------
    points
        One row per model shown: every field of its score row (both variants of
        Toeplitzness, null baseline and excess; provenance; ``score_cache``) plus
        ``label``, ``kind`` (``reference``/``extra``), ``version``, ``size``,
        ``metric``, ``metric_value``, ``value_source`` and ``variant``.
    metric
        The benchmark on the y axis.
    variant
        ``full`` or ``exclude_diagonal``.
    settings
        Scoring settings used.
    missing
        Models left out because they could not be had offline.
    missing_reason
        Why they could not be had.
    """

    points: pd.DataFrame
    metric: Metric
    variant: str
    settings: ScoreSettings
    missing: list[str] = field(default_factory=list)
    missing_reason: str | None = None

    @property
    def suffix(self) -> str:
        """Column suffix of the plotted variant (``""`` or ``"_offdiag"``)."""
        return "_offdiag" if self.variant == "exclude_diagonal" else ""

    @property
    def x(self) -> pd.Series:
        """Plotted Toeplitzness of each point (the chosen variant)."""
        return self.points["toeplitzness" + self.suffix]

    def null_band(self) -> tuple[float, float] | None:
        """Mean and standard deviation of the null baseline over the models shown.

        The null draws of all models are pooled (law of total variance: the mean
        of the per-model variances plus the variance of the per-model means).
        ``None`` when no model has a null baseline (``null_draws=0``).
        """
        import numpy as np

        means = self.points["null_mean" + self.suffix].to_numpy(dtype=float)
        stds = self.points["null_std" + self.suffix].to_numpy(dtype=float)
        ok = np.isfinite(means) & np.isfinite(stds)
        if not ok.any():
            return None
        m = float(means[ok].mean())
        var = float(np.mean(stds[ok] ** 2 + (means[ok] - m) ** 2))
        return m, math.sqrt(var)

    def arrows(self) -> list[dict[str, Any]]:
        """One ``{size, start, end}`` per size with both versions shown (v1 -> v2)."""
        col = "toeplitzness" + self.suffix
        ref = self.points[self.points["kind"] == "reference"]
        out = []
        for size, grp in ref.groupby("size", sort=False):
            by = grp.set_index("version")
            if {"v1", "v2"} <= set(by.index):
                out.append({
                    "size": size,
                    "start": (float(by.loc["v1", col]), float(by.loc["v1", "metric_value"])),
                    "end": (float(by.loc["v2", col]), float(by.loc["v2", "metric_value"])),
                })
        return out

    def arrow_lines(self) -> list[str]:
        """One line per arrow: the change of Toeplitzness and of the metric from v1 to v2."""
        lines = []
        for a in self.arrows():
            (x1, y1), (x2, y2) = a["start"], a["end"]
            lines.append(f"{a['size']}: v1 → v2 Toeplitzness {change(x2 - x1, 4)}, {self.metric.name} {change(y2 - y1, 2)}")
        return lines


def toeplitzness_vs_performance(
    models: Sequence[str] = (),
    *,
    metric: str = "average",
    scores: Mapping[str, float] | None = None,
    settings: ScoreSettings | None = None,
    exclude_diagonal: bool = HEADLINE_EXCLUDE_DIAGONAL,
    cache: ScoreCache | None = None,
    allow_missing: bool = False,
    allow_empty: bool = False,
    progress_label: str | None = "scoring",
) -> PerformanceComparison:
    """Score ALBERT v1/v2 (and extra models) and pair each with a benchmark value.

    Parameters
    ----------
    models
        ALBERT reference checkpoints (canonical ids such as ``albert/albert-base-v2``
        or aliases such as ``albert-base-v2``) select which of the eight are shown
        (default: all eight). Any other model is an extra point and needs a value
        in ``scores``.
    metric
        A key of :data:`posviz.reference.METRICS`.
    scores
        ``{model: value}`` for extra models, in the metric's units. A model named
        only here is added as an extra model.
    settings
        Scoring settings (normalisation, null baseline, positions, table).
    exclude_diagonal
        Plot the off-diagonal variant of Toeplitzness.
    cache
        Score cache; ``None`` bypasses it.
    allow_missing
        Leave out checkpoints that cannot be had offline instead of raising
        :class:`~posviz.scoring.batch.MissingModelsError`.
    allow_empty
        With ``allow_missing``: return a comparison with no points when none of
        the checkpoints can be had (for a figure that shows something else too,
        such as training runs) instead of raising.
    progress_label
        Progress bar text (``None``: no bar).

    Returns
    -------
    PerformanceComparison
    """
    from posviz.reference import albert_results

    if metric not in METRICS:
        raise OptionError(f"unknown metric {metric!r}", f"choose one of: {', '.join(METRICS)}")
    scores = dict(scores or {})
    settings = settings or ScoreSettings()
    table = albert_results()

    requests, info = _requests(models, scores, table, metric)
    scored = score_models(requests, settings, cache=cache, allow_missing=allow_missing,
                          missing_alternative=None, partial_alternative="pass --allow-missing to plot the others",
                          progress_label=progress_label)
    if not scored.rows and not (allow_missing and allow_empty):
        raise MissingModelsError([m.spec for m in scored.missing], scored.missing_reason or "they cannot be had", alternative=None)
    variant = "exclude_diagonal" if exclude_diagonal else "full"
    return PerformanceComparison(
        points=_points(scored, requests, info, metric=metric, variant=variant),
        metric=METRICS[metric],
        variant=variant,
        settings=settings,
        missing=[m.spec for m in scored.missing],
        missing_reason=scored.missing_reason,
    )


def _requests(models: Sequence[str], scores: Mapping[str, float], table: pd.DataFrame, metric: str) -> tuple[list[ModelRequest], list[dict[str, Any]]]:
    """What to score (ALBERT checkpoints by size and version, then the extra models) and each point's fields."""
    chosen, extras = _split_models(models, scores, table, metric)
    requests: list[ModelRequest] = []
    info: list[dict[str, Any]] = []
    sizes = list(dict.fromkeys(table["size"]))
    for i in sorted(chosen, key=lambda i: (sizes.index(table.loc[i, "size"]), table.loc[i, "version"])):
        r = table.loc[i]
        spec = next((m for m in models if _reference_row(m, table) == i and "@" in m), None)
        requests.append(ModelRequest(spec, ()) if spec else ModelRequest(r["hub_id"], (r["alias"],)))
        info.append({
            "label": f"{r['size']} {r['version']}", "kind": "reference", "version": r["version"], "size": r["size"],
            "metric_value": float(r[metric]), "value_source": table.attrs["source"],
        })
    for spec in extras:
        requests.append(ModelRequest(spec))
        info.append({"label": spec, "kind": "extra", "version": None, "size": None, "metric_value": scores[spec], "value_source": "given by the user (--score)"})
    return requests, info


def _points(scored, requests: list[ModelRequest], info: list[dict[str, Any]], *, metric: str, variant: str) -> pd.DataFrame:
    """One row per scored model: its score row and point fields, the point fields first."""
    import pandas as pd

    by_request = {id(req): row for req, row in zip(scored.requests, scored.rows, strict=True)}
    records = []
    for req, extra in zip(requests, info, strict=True):
        row = by_request.get(id(req))
        if row is not None:
            model = req.spec if extra["kind"] == "extra" else row.get("model", req.spec)
            records.append({**row, **extra, "model": model, "metric": metric, "variant": variant})
    front = ["label", "kind", "version", "size", "model", "metric", "metric_value", "value_source", "variant"]
    columns = list(dict.fromkeys(front + [k for rec in records for k in rec]))
    if not records:  # the columns the table and the figure read
        columns += [f"{k}{sfx}" for k in ("toeplitzness", "null_mean", "null_std", "excess") for sfx in ("", "_offdiag")]
    return pd.DataFrame.from_records(records, columns=columns)
