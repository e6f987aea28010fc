"""DeBERTa: the Gram matrix ``R R^T`` of the relative position embeddings.

One matrix over relative positions ``-span .. span-1`` (rows of
``encoder.rel_embeddings`` that transformers uses), factored, not Toeplitz in
general; with ``--ln ln`` the encoder LayerNorm is applied first when the config
does (``norm_rel_ebd``). See ARCHITECTURE.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from posviz.errors import OptionError, UnsupportedModelError
from posviz.extract.base import HeadsOptions, layer_head_counts, no_table, read_finite
from posviz.extract.cached import CachedHeads
from posviz.positional_scores import PositionalScores
from posviz.read.families import Family
from posviz.schemes.absolute import layer_norm

if TYPE_CHECKING:
    from posviz.read.sources import Source


def claims(family: Family, config: Mapping[str, Any]) -> bool:
    """The DeBERTa family."""
    return family.name == "deberta"


def attention_span(config: Mapping[str, Any]) -> int:
    """DeBERTa's ``att_span``: ``position_buckets`` if set, else ``max_relative_positions`` (or the maximum length)."""
    buckets = int(config.get("position_buckets", -1) or -1)
    span = int(config.get("max_relative_positions", -1) or -1)
    if span < 1:
        span = int(config.get("max_position_embeddings", 512))
    return buckets if buckets > 0 else span


def open_heads(source: Source, family: Family, options: HeadsOptions) -> CachedHeads:
    """The relative-embedding Gram matrix (one "head", the same for every layer)."""
    from posviz.read.checkpoints import Checkpoint

    config = source.config
    no_table(options, config)
    if options.positions is not None:
        raise OptionError("--positions does not apply to DeBERTa", "its relative table is indexed by relative position")
    if not config.get("relative_attention", False):
        raise UnsupportedModelError(f"{source.label}: this DeBERTa model has relative_attention off (no relative embeddings)")
    ckpt = Checkpoint(source)
    name = ckpt.require("encoder.rel_embeddings.weight", "relative embeddings")
    span = attention_span(config)
    stored = ckpt.shape(name)[0]
    rows = min(stored, 2 * span)  # transformers uses rel_embeddings[0 : 2 * att_span]
    norms: list[str] = []  # filled when make() applies the LayerNorm
    normalise = options.ln != "none" and "layer_norm" in str(config.get("norm_rel_ebd", "none")).lower()

    def make() -> PositionalScores:
        r = read_finite(ckpt, name, slice(0, rows))
        if normalise:
            g, b = ckpt.require("encoder.LayerNorm.weight"), ckpt.require("encoder.LayerNorm.bias")
            r = layer_norm(r, read_finite(ckpt, g), read_finite(ckpt, b), float(config.get("layer_norm_eps", 1e-7)))
            norms[:] = [g, b]
        return PositionalScores.from_factors(r)

    conv: dict[str, Any] = {
        "tensor": name,
        "ln": options.ln,
        "layer_norms": norms,
        "matrix": "Gram matrix R R^T of the relative embeddings (rows: relative positions -span .. span-1)",
        "shared_across_layers": True,
        "scale": 1.0,
        "scale_rule": "1",
    }
    common = {"family": "deberta", "rows_note": f"rows 0-{rows - 1} of {stored} (relative positions {-span}..{span - 1})"}
    return CachedHeads("DeBERTa relative embeddings", source.label, source.describe(), config,
                       layer_head_counts(config)[0], 1, rows, -span, common, lambda layer: ("deberta", make, conv))


def describe(c: Mapping[str, Any]) -> list[str]:
    """Parts of the conventions line: tensor, matrix, LayerNorm."""
    if not c.get("matrix"):
        return []
    return [f"from {c['tensor']}", c["matrix"], *(["after encoder.LayerNorm"] if c.get("layer_norms") else [])]
