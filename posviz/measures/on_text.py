"""posviz's own text measures on the contract: ``attention`` and ``hidden`` as requests, values and series rows.

Their parts in the one pass over text, named by :mod:`posviz.measures.builtin` and used by every loop over the
registry (``posviz trajectory``, ``posviz measure``): the request a :class:`~posviz.measures.contract.SeriesOptions`
makes, the numbers of one model's result (:func:`attention_values`, :func:`hidden_values`), and the rows of one
checkpoint of a series (:func:`attention_rows`: one per checkpoint, means over heads; :func:`hidden_rows`: one per
checkpoint and layer).
"""

from __future__ import annotations

from typing import Any

from posviz.measures.builtin import ATTENTION_COLUMNS, HIDDEN_COLUMNS

#: Per-head fields averaged into a checkpoint's attention row.
FIELDS = ("toeplitzness_offdiag", "null_mean_offdiag", "toeplitzness", "null_mean", "positional_share",
          "positional_share_null", "sink_mass")
#: Per-head fields of the tiled path (transformers 5), averaged where the records have them; with ``sink_rate``, the
#: share of all the chosen heads whose sink mass exceeds the records' ``sink_rate_eps``.
LONG_CONTEXT_FIELDS = ("entropy_normalised", "span50", "span90")



def attention_request(options: Any) -> Any:
    """``attention``'s part in a text pass: the chosen layers (default: every layer), tiled statistics."""
    from posviz.observe.attention_pass import AttentionRequest

    return AttentionRequest(layers=options.layers or "all")


def hidden_request(options: Any) -> Any:
    """``hidden``'s part in a text pass: the chosen layers (default: all, 0 the embedding output) and the seed."""
    from posviz.observe.hidden_pass import HiddenRequest

    return HiddenRequest(layers=options.layers or "all", seed=options.seed)


def head_means(result: Any) -> dict[str, Any]:
    """Means and spread over heads of an attention result's records, the sink rate, and the excess over the null."""
    import numpy as np

    records = result.records()
    row: dict[str, Any] = {}
    for name in FIELDS + tuple(f for f in LONG_CONTEXT_FIELDS if f in records[0]):
        values = np.array([r[name] for r in records], dtype=float)
        row[name] = float(values.mean())
        row[f"{name}_sd_over_heads"] = float(values.std())
    if "sink" in records[0]:
        row["sink_rate"] = float(np.mean([r["sink"] for r in records]))
        row["sink_rate_eps"] = records[0]["sink_rate_eps"]
    for name, null in (("toeplitzness_offdiag", "null_mean_offdiag"), ("toeplitzness", "null_mean")):
        suffix = name.removeprefix("toeplitzness")
        row["excess" + suffix] = (row[name] - row[null]) / (1 - row[null]) if row[null] < 1 else float("nan")
    return row


def attention_values(result: Any) -> dict[str, float]:
    """The numbers of one model's attention: means over its chosen heads (:data:`ATTENTION_COLUMNS`)."""
    means = head_means(result)
    return {key: means[key] for key, _ in ATTENTION_COLUMNS}


def hidden_values(result: Any) -> dict[str, float]:
    """The numbers of one model's hidden states: those of its last measured layer (:data:`HIDDEN_COLUMNS`)."""
    last = result.records()[-1]
    return {key: float(last[key]) for key, _ in HIDDEN_COLUMNS}


def attention_rows(result: Any, point: Any, where: dict[str, str]) -> list[dict[str, Any]]:
    """One checkpoint's attention row: means and spread over heads, and every head's value."""
    records = result.records()
    row: dict[str, Any] = {"model": point.spec, "series": point.series, "step": point.step, "measure": "attention", **where,
                           "positions": result.seq_len, "blocks": result.blocks, "layers": ",".join(map(str, result.layers)),
                           "heads": len(records), "causal": result.causal, **head_means(result)}
    for r in records:
        row[f"toeplitzness_offdiag_l{r['layer']}_h{r['head']}"] = r["toeplitzness_offdiag"]
    return [row]


def hidden_rows(result: Any, point: Any, where: dict[str, str]) -> list[dict[str, Any]]:
    """One checkpoint's hidden-state rows: one per layer, each its own series (``RUN · layer L``)."""
    return [{**rec, "model": point.spec, "series": f"{point.series} · layer {rec['layer']}", "run": point.series,
             "step": point.step, "measure": "hidden", **where} for rec in result.records()]

