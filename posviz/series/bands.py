"""RoPE band usage along a checkpoint series: ``posviz trajectory --measure bands``.

Each checkpoint of a series (the revisions of a Pythia or OLMo repository, or hub
ids that carry their step) is opened as ``posviz heads`` opens it, and the
requested layers give one row per head: band energy over the rotary bands, the
high-frequency share, the dominant band and the probe-profile summaries
(definitions: docs/definitions.md). :func:`measure_for` picks the default measure
of a series: band usage for RoPE models, E_P Toeplitzness otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from posviz.series.points import SeriesPoint

#: Row fields of a band trajectory, after model, series, step, layer and head.
FIELDS = ("band_energy", "band_wavelength", "dominant_band", "dominant_wavelength", "high_share", "low_share",
          "probe", "peak_offset", "locality", "weight_prev", "logit_prev", "rope_type", "rotary_dim", "positions")
MEASURES = ("auto", "toeplitzness", "bands")


def measure_for(spec: str) -> str:
    """``bands`` when ``spec`` is a RoPE model, else ``toeplitzness`` (reads only its config)."""
    from posviz.errors import PosvizError
    from posviz.read.families import family_for_config
    from posviz.read.sources import resolve_source

    try:
        config = resolve_source(spec).config
        return "bands" if config and family_for_config(config).scheme == "rotary" else "toeplitzness"
    except PosvizError:
        return "toeplitzness"  # the Toeplitzness path names the problem with its own error


def band_rows(points: Sequence[SeriesPoint], *, layers: str | None = None, probe: str | None = None,
              positions: str | None = None) -> list[dict[str, Any]]:
    """One row per checkpoint, layer and head, sorted by step then series.

    Parameters
    ----------
    points
        The checkpoints (:func:`~posviz.series.points.series_points`, :func:`~posviz.series.points.revision_points`).
    layers
        ``all`` or a list like ``0,2,5-7`` (default: layer 0).
    probe
        Content probe of the profiles (``posviz heads --probe``; default ``mean``).
    positions
        ``A:B`` positions of the profiles (default ``0:512``).

    Raises
    ------
    PosvizError
        A checkpoint that cannot be had, is not a RoPE model, or lacks a requested layer.
    """
    from concurrent.futures import ThreadPoolExecutor

    from posviz.scoring.batch import fetch_workers
    from posviz.util.progress import progress

    points = list(points)
    # Checkpoints are fetched by a small pool of threads, as score_models does for E_P series (POSVIZ_FETCH_WORKERS).
    pool = ThreadPoolExecutor(max_workers=max(1, min(fetch_workers(), len(points))), thread_name_prefix="posviz-bands")
    rows: list[dict[str, Any]] = []
    try:
        futures = [pool.submit(_checkpoint_rows, p, layers, probe, positions) for p in points]
        for i, _ in enumerate(progress(points, "checkpoint")):
            rows += futures[i].result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    rows.sort(key=lambda r: (r["step"], r["series"], r["layer"], r["head"]))
    return rows


def _checkpoint_rows(p: SeriesPoint, layers: str | None, probe: str | None, positions: str | None) -> list[dict[str, Any]]:
    """The band rows of one checkpoint (run in a worker thread, its byte bars off)."""
    from posviz.errors import UnsupportedModelError
    from posviz.extract.registry import open_heads
    from posviz.scoring.layers import LayerTable, parse_layers, scan_layers
    from posviz.util.progress import quiet_bytes

    with quiet_bytes():
        heads = open_heads(p.spec, probe=probe, positions=positions)  # None: RoPE's default (mean); other schemes refuse a probe
        table = LayerTable(heads.metadata())
        for scored in scan_layers(heads, parse_layers(None, layers, heads.num_layers, p.spec)):
            table.add(scored)
    out = []
    for r in table.rows():
        if "band_energy" not in r:
            raise UnsupportedModelError(f"{p.spec}: no RoPE band usage ({r.get('scheme')})",
                                        "--measure bands needs a RoPE model and a probe other than none")
        out.append({"model": p.spec, "series": p.series, "step": p.step, "layer": r["layer"], "head": r["head"],
                    **{k: r[k] for k in FIELDS if k in r}})
    return out


def band_summary(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per checkpoint and layer: mean and sd over heads of the high-frequency share, mean band shares and profile summaries."""
    import numpy as np

    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["series"], r["step"], r["layer"]), []).append(r)
    out = []
    for (series, step, layer), rs in groups.items():
        energy = np.array([r["band_energy"] for r in rs], dtype=float)
        share = energy / np.maximum(energy.sum(axis=1, keepdims=True), np.finfo(float).tiny)
        high = np.array([r["high_share"] for r in rs], dtype=float)
        out.append({"series": series, "step": step, "layer": layer, "heads": len(rs),
                    "high_share_mean": float(high.mean()), "high_share_sd": float(high.std()),
                    "band_share_mean": share.mean(axis=0).tolist(),
                    "weight_prev_mean": float(np.mean([r["weight_prev"] for r in rs])),
                    "locality_median": float(np.median([r["locality"] for r in rs]))})
    return out
