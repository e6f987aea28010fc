"""ALiBi models (BLOOM, MPT, Falcon with ``alibi``): the fixed bias ``f_h(k) = -m_h |k|``.

Slopes from :mod:`posviz.schemes.alibi` (BLOOM's or MPT's closed form, float64);
the stack is the same for every layer. Causal models only ever use ``k <= 0``.
See ARCHITECTURE.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from posviz.errors import UnsupportedModelError
from posviz.extract.base import HeadsOptions, layer_head_counts, no_table, relative_positions
from posviz.extract.cached import CachedHeads
from posviz.positional_scores import PositionalScores
from posviz.read.families import Family
from posviz.schemes import alibi

if TYPE_CHECKING:
    from posviz.read.sources import Source


def claims(family: Family, config: Mapping[str, Any]) -> bool:
    """The ALiBi family (BLOOM, MPT), and Falcon models built with ``alibi``."""
    return family.name == "alibi" or (config.get("model_type") == "falcon" and bool(config.get("alibi")))


def _slopes(source: Source) -> tuple[list[float], str]:
    config = source.config
    if config.get("model_type") != "mpt":
        rule = "BLOOM's closed form (as transformers build_alibi_tensor)"
        return alibi.slopes(layer_head_counts(config)[1], kind="bloom").tolist(), rule
    attn = config.get("attn_config") or {}
    if attn.get("alibi") is False:
        raise UnsupportedModelError(f"{source.label}: this MPT model does not use ALiBi (attn_config.alibi is false)")
    bias_max = float(attn.get("alibi_bias_max", 8))
    rule = f"MPT's closed form (as transformers build_mpt_alibi_tensor), alibi_bias_max {bias_max:g}"
    return alibi.slopes(layer_head_counts(config)[1], kind="mpt", alibi_bias_max=bias_max).tolist(), rule


def open_heads(source: Source, family: Family, options: HeadsOptions) -> CachedHeads:
    """The ALiBi bias of every head (one stack for all layers)."""
    no_table(options, source.config)
    start, stop = relative_positions(options.positions, "ALiBi")
    n = stop - start
    layers, heads = layer_head_counts(source.config)
    slopes, rule = _slopes(source)
    conv = {
        "slopes": slopes,
        "slope_rule": rule,
        "form": "-m_h |j - i|; causal: the model masks k = j - i > 0, and -m_h (i - j) is what it adds for k <= 0 (up to a per-row constant)",
        "causal": True,
        "shared_across_layers": True,
        "scale": 1.0,
        "scale_rule": "1 (the bias is added to the scaled Q K^T)",
    }

    def plan(layer: int):
        return "alibi", lambda: PositionalScores.from_offsets(alibi.bias_offsets(slopes, n)), conv

    return CachedHeads("ALiBi linear distance bias", source.label, source.describe(), source.config,
                       layers, heads, n, start, {"family": "alibi"}, plan)


def describe(c: Mapping[str, Any]) -> list[str]:
    """Parts of the conventions line: the slope rule."""
    return [f"slopes from {c['slope_rule']}; causal (k > 0 masked)"] if c.get("slope_rule") else []
