"""Models trained by ``posviz train``: analysed by the model's own positional code.

Their ``model_type`` is ``posviz-albert`` (absolute, sinusoidal, TISA, TUPE,
T5, ALiBi and RoPE positions). Each layer's stack comes from
:func:`posviz.models.position_terms.positional_scores`, which evaluates the
scheme's own ``nn.Module`` (or, for the absolute and sinusoidal tables, the
position-only logits of the layer's group) in float64: the analysis reads
exactly what the model adds to its attention logits. This is the one scheme
whose analysis imports torch.

RoPE adds nothing to the logits: a ``rope`` run goes to the band code of every
other RoPE model (:mod:`posviz.extract.rope`, which imports no torch), with the
run's layout (:func:`posviz.read.rope_layouts.posviz_layout`) and a probe that
follows ALBERT's embedding path (:func:`albert_probe_map`). See ARCHITECTURE.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from posviz.errors import OptionError
from posviz.extract.cached import CachedHeads
from posviz.positional_scores import PositionalScores
from posviz.read.families import POSVIZ_MODEL_TYPE, Family

if TYPE_CHECKING:
    from posviz.extract.base import HeadsOptions
    from posviz.read.checkpoints import Checkpoint
    from posviz.read.sources import Source

COMPUTED_BY = "posviz.models.position_terms.positional_scores (the model's own positional code)"


def claims(family: Family, config: Mapping[str, Any]) -> bool:
    """Every family of ``posviz-albert`` (whatever its ``position_scheme``)."""
    return POSVIZ_MODEL_TYPE in family.model_types


def _conventions(stack: PositionalScores) -> dict[str, Any]:
    """The conventions of a layer's stack, from the model code's own metadata."""
    m = stack.meta
    out: dict[str, Any] = {
        "position_scheme": m.get("scheme"),
        "computed_by": COMPUTED_BY,
        "shared_across_layers": bool(m.get("shared_across_layers")),
        "scale_rule": m.get("scale", "1 (added to the scaled logits)"),
    }
    if "convention" in m:  # absolute table: position-only Q K^T of the layer's group
        out.update(ln=m["convention"], bias=True, layer_group=m.get("layer_group"))
    if m.get("cls_untied"):
        out["cls_untied"] = True
    if m.get("causal"):
        out["causal"] = True
    return out


def albert_probe_map(ckpt: Checkpoint) -> tuple[Callable[[np.ndarray], np.ndarray], str]:
    """Token embeddings to the first layer's input, as a posviz model computes it without positions.

    ``map(LN(e + t_0))``: token type 0 added, the embedding LayerNorm, then
    ``embedding_hidden_mapping_in`` (with its bias). Exact for layer 0 of a RoPE
    run, which has no position table; deeper layers see this probe too (as for
    every RoPE model, docs/definitions.md).
    """
    from posviz.extract.base import read_finite
    from posviz.schemes.absolute import layer_norm

    def get(suffix: str) -> np.ndarray:
        return read_finite(ckpt, ckpt.require(suffix, "embedding parameter"))

    type0 = get("embeddings.token_type_embeddings.weight")[0]
    gain, bias = get("embeddings.LayerNorm.weight"), get("embeddings.LayerNorm.bias")
    w, b = get("encoder.embedding_hidden_mapping_in.weight"), get("encoder.embedding_hidden_mapping_in.bias")
    eps = float(ckpt.config.get("layer_norm_eps", 1e-12))

    def to_input(x: np.ndarray) -> np.ndarray:
        return layer_norm(x + type0, gain, bias, eps) @ w.T + b

    return to_input, "token type 0, the embedding LayerNorm and embedding_hidden_mapping_in (the first layer's input)"


def _positions(options: HeadsOptions, max_n: int) -> int:
    from posviz.read.embeddings import parse_positions

    sl = parse_positions(options.positions) if isinstance(options.positions, str) or options.positions is None else options.positions
    start = 0 if sl is None or sl.start is None else int(sl.start)
    stop = max_n if sl is None or sl.stop is None else int(sl.stop)
    if start != 0 or not 2 <= stop <= max_n:
        raise OptionError(f"--positions {start}:{stop} is not available here", f"posviz models take 0:B with 2 <= B <= {max_n}")
    return stop


def open_heads(source: Source, family: Family, options: HeadsOptions) -> CachedHeads:
    """Layer-by-layer stacks from :func:`posviz.models.position_terms.positional_scores`.

    ``--ln`` chooses the convention of absolute tables; ``--no-bias`` and
    ``--table`` do not apply; ``--positions`` takes ``0:B`` (default: all).
    RoPE runs: per-head bands and probe profiles (:func:`posviz.extract.rope.open_heads`).
    """
    config = source.config
    if config.get("position_scheme") == "rope":
        from posviz.extract import rope

        return rope.open_heads(source, family, options, probe_map=albert_probe_map, causal=bool(config.get("is_causal")))
    if options.table is not None:
        raise OptionError("--table does not apply to models trained with posviz train")
    if not options.bias:
        raise OptionError("--no-bias is not available for models trained with posviz train", "their maps always include the biases")
    n = _positions(options, int(config.get("max_position_embeddings", 512)))

    def plan(layer: int):
        from posviz.models.position_terms import positional_scores

        stack = positional_scores(source, layer=layer, n=n, convention=options.ln)  # resolved once for all layers
        return ("shared" if stack.meta.get("shared_across_layers") else layer), (lambda: stack), _conventions(stack)

    scheme = f"posviz model, position_scheme {config.get('position_scheme', 'absolute')!r}"
    return CachedHeads(scheme, source.label, source.describe(), config, int(config["num_hidden_layers"]),
                       int(config["num_attention_heads"]), n, 0, {"family": family.name}, plan)


def describe(c: Mapping[str, Any]) -> list[str]:
    """Parts of the conventions line: which code computed the scores, layer group, [CLS] untie."""
    if not c.get("computed_by"):
        return []
    parts = [f"position scheme {c['position_scheme']!r} computed by {c['computed_by']}"]
    if c.get("layer_group") is not None:
        parts.append(f"layer group {c['layer_group']}")
    if c.get("cls_untied"):
        parts.append("[CLS] row and column untied")
    if c.get("causal"):
        parts.append("causal (k = j - i > 0 masked)")
    return parts
