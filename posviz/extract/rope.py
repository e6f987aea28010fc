"""RoPE models (LLaMA, Mistral, GPT-NeoX, GPT-J, ...): the content-free kernel ``f(k) = sum_i cos(k theta_i)``.

Frequencies from :mod:`posviz.schemes.rope` (every ``rope_type``, partial
rotary); one Toeplitz matrix, the same for every head and layer. See
ARCHITECTURE.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from posviz.extract import alibi
from posviz.extract.base import HeadsOptions, layer_head_counts, no_table, relative_positions
from posviz.extract.cached import CachedHeads
from posviz.positional_scores import PositionalScores
from posviz.read.families import Family
from posviz.schemes import rope

if TYPE_CHECKING:
    from posviz.read.sources import Source


def claims(family: Family, config: Mapping[str, Any]) -> bool:
    """The rotary family, except Falcon models built with ``alibi``."""
    return family.scheme == "rotary" and not alibi.claims(family, config)


def open_heads(source: Source, family: Family, options: HeadsOptions) -> CachedHeads:
    """The kernel of the model's rotary frequencies, tiled over the heads."""
    config = source.config
    no_table(options, config)
    start, stop = relative_positions(options.positions, "RoPE")
    n = stop - start
    layers, heads = layer_head_counts(config)
    spec = rope.rope_spec(config)
    conv = {
        "rope_type": spec.rope_type,
        "rope_theta": spec.theta,
        "head_dim": spec.head_dim,
        "rotary_dim": spec.rotary_dim,
        "attention_factor": spec.attention_factor,
        "kernel": "sum_i cos(k theta_i) over the rotated pairs (content-free: identical unit-pair q and k); same for every head and layer",
        "shared_across_layers": True,
        "scale": 1.0,
        "scale_rule": "1 (kernel before the model's 1/sqrt(d_h))",
    }
    if spec.note:
        conv["rope_note"] = spec.note

    def make() -> PositionalScores:
        f = rope.kernel_offsets(spec.inv_freq, n, spec.attention_factor)
        return PositionalScores.from_offsets(np.tile(f, (heads, 1)))

    return CachedHeads("RoPE content-free kernel", source.label, source.describe(), config,
                       layers, heads, n, start, {"family": "rotary"}, lambda layer: ("rope", make, conv))


def describe(c: Mapping[str, Any]) -> list[str]:
    """Parts of the conventions line: rope type, base, rotated dimensions."""
    if not c.get("rope_type"):
        return []
    return [f"rope {c['rope_type']}, theta {c['rope_theta']:g}, {c['rotary_dim']} of {c['head_dim']} dims rotated"]
