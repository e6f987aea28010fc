"""T5 (and mT5, UMT5, LongT5): each head's learned relative bucket bias, ``f_h(k) = W[bucket(k), h]``.

Buckets from :mod:`posviz.schemes.t5` (the arithmetic of transformers'
``T5Attention._relative_position_bucket``); the stack is exactly Toeplitz and
stored as offsets. T5 and mT5 share block 0's bias with every layer; UMT5 keeps
one per layer. See ARCHITECTURE.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from posviz.errors import CheckpointError, OptionError
from posviz.extract.base import HeadsOptions, read_finite, relative_positions
from posviz.extract.cached import CachedHeads
from posviz.positional_scores import PositionalScores
from posviz.read.families import Family
from posviz.schemes import t5

if TYPE_CHECKING:
    from posviz.read.sources import Source


def claims(family: Family, config: Mapping[str, Any]) -> bool:
    """The T5 family."""
    return family.name == "t5"


def _num_layers(config: Mapping[str, Any], side: str) -> int:
    if side == "encoder":
        return int(config.get("num_layers", 0))
    return int(config.get("num_decoder_layers") or config.get("num_layers", 0))


def open_heads(source: Source, family: Family, options: HeadsOptions) -> CachedHeads:
    """The bucket bias of the encoder (default) or of the decoder's self-attention (``--table decoder``)."""
    from posviz.read.checkpoints import Checkpoint

    config = source.config
    side = options.table or "encoder"
    if side not in ("encoder", "decoder"):
        raise OptionError(f"T5 has no table {side!r}", "choose encoder or decoder")
    heads = int(config["num_heads"])
    start, stop = relative_positions(options.positions, "T5")
    n = stop - start
    ckpt = Checkpoint(source)
    buckets = {
        "bidirectional": side == "encoder",
        "num_buckets": int(config.get("relative_attention_num_buckets", 32)),
        "max_distance": int(config.get("relative_attention_max_distance", 128)),
    }

    def tensor(layer: int) -> str | None:
        return ckpt.find(f"{side}.block.{layer}.layer.0.SelfAttention.relative_attention_bias.weight")

    shared = tensor(0)
    if shared is None:
        raise CheckpointError(f"{source.label}: no {side} relative_attention_bias in the checkpoint")

    def plan(layer: int):
        name = tensor(layer) or shared  # UMT5 keeps one bias per layer; T5 and mT5 share block 0's

        def make() -> PositionalScores:
            w = read_finite(ckpt, name)
            if w.shape != (buckets["num_buckets"], heads):
                raise CheckpointError(f"{source.label}: {name} has shape {w.shape}, expected ({buckets['num_buckets']}, {heads})")
            return PositionalScores.from_offsets(t5.bias_offsets(w, n, **buckets))

        conv = {
            "tensor": name,
            "shared_across_layers": name == shared and tensor(1) is None,
            **buckets,
            "buckets": "transformers T5Attention._relative_position_bucket(j - i)",
            "scale": 1.0,
            "scale_rule": "1 (T5 adds the bias to unscaled Q K^T)",
        }
        return name, make, conv

    return CachedHeads(f"T5 relative bucket bias ({side})", source.label, source.describe(), config,
                       _num_layers(config, side), heads, n, start, {"family": "t5", "table": side}, plan)


def describe(c: Mapping[str, Any]) -> list[str]:
    """Parts of the conventions line: tensor and bucket settings."""
    if "bidirectional" not in c:
        return []
    return [f"from {c['tensor']}",
            f"{'bidirectional' if c['bidirectional'] else 'causal'} buckets: {c['num_buckets']}, max distance {c['max_distance']}"]
