"""Per-head positional matrices of relative-position schemes.

Every scheme here adds to (or rotates) the attention logits by something that
depends on the offset ``k = j - i`` only, so each head's matrix is Toeplitz and
is stored as its offset values ``f(k)`` (:meth:`PositionalScores.from_offsets`):

* T5 (and mT5, UMT5): the learned bucket bias, ``f_h(k) = W[bucket(k), h]``,
  with transformers' own ``T5Attention._relative_position_bucket``;
* ALiBi (BLOOM, MPT, Falcon with ``alibi``): ``f_h(k) = -m_h |k|`` with the
  slopes ``m_h`` of transformers' ``build_alibi_tensor`` /
  ``build_mpt_alibi_tensor`` (same closed forms, in float64); causal models only
  ever use ``k <= 0``;
* RoPE (LLaMA, Mistral, GPT-NeoX, GPT-J, ...): the content-free kernel
  ``f(k) = sum_i cos(k theta_i)`` over the rotated pairs, from the config
  (``rope_theta``, partial rotary: GPT-NeoX ``rotary_pct``, Phi
  ``partial_rotary_factor``, GPT-J ``rotary_dim``);
* DeBERTa: the Gram matrix ``R R^T`` of the relative embeddings (one matrix over
  relative positions, factored, not Toeplitz in general).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from posviz.errors import CheckpointError, OptionError, UnsupportedModelError
from posviz.positional_scores import PositionalScores

if TYPE_CHECKING:
    from posviz.toeplitz.result import ToeplitzScore

#: Positions shown for schemes without a position table, unless ``--positions`` says otherwise.
DEFAULT_RELATIVE_POSITIONS = 512

_LAYER_KEYS = ("num_hidden_layers", "n_layer", "n_layers", "num_layers")
_HEAD_KEYS = ("num_attention_heads", "n_head", "n_heads", "num_heads")


def _first(config: Mapping[str, Any], keys: tuple[str, ...], default: Any = None) -> Any:
    for k in keys:
        if config.get(k) is not None:
            return config[k]
    return default


def offsets_axis(n: int) -> np.ndarray:
    """Offsets ``k = j - i`` from ``-(n-1)`` to ``n-1`` (the layout of ``from_offsets``)."""
    return np.arange(1 - n, n)


# ---- T5 -------------------------------------------------------------------
def t5_buckets(n: int, *, bidirectional: bool, num_buckets: int, max_distance: int) -> np.ndarray:
    """Bucket index of every offset ``k = j - i``, ``|k| < n``, from transformers' T5 code."""
    import torch
    from transformers.models.t5.modeling_t5 import T5Attention

    rel = torch.arange(1 - n, n, dtype=torch.long)  # memory_position - query_position = j - i
    buckets = T5Attention._relative_position_bucket(rel, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance)
    return buckets.numpy()


def t5_bias_offsets(weight: np.ndarray, n: int, *, bidirectional: bool, num_buckets: int, max_distance: int) -> np.ndarray:
    """T5's relative bias as offset values, shape ``(heads, 2n - 1)``.

    Parameters
    ----------
    weight
        ``relative_attention_bias.weight``, shape ``(num_buckets, heads)``.
    n
        Number of positions.
    bidirectional
        True for the encoder, False for the decoder's causal self-attention.
    """
    idx = t5_buckets(n, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance)
    return np.asarray(weight, dtype=np.float64)[idx].T.copy()


# ---- ALiBi ----------------------------------------------------------------
def alibi_slopes(num_heads: int, *, kind: str = "bloom", alibi_bias_max: float = 8.0) -> np.ndarray:
    """Per-head ALiBi slopes ``m_h``, in float64, by the algorithms transformers uses.

    Parameters
    ----------
    num_heads
        Number of heads.
    kind
        ``bloom`` (also Falcon; transformers' ``_get_alibi_slopes``): the
        geometric slopes ``2^(-8 h / H)`` of Press et al. for the largest power of
        two ``H <= num_heads``, then every other slope of the next power of two;
        ``mpt`` (``build_mpt_alibi_tensor``): ``2^(-h * alibi_bias_max / P)`` for the
        next power of two ``P``, odd entries first, cut to ``num_heads``.

    Notes
    -----
    transformers computes the slopes in float32; posviz analyses in float64 and
    uses the same closed forms (the tests compare both to float32 precision).
    """
    if num_heads < 1:
        raise UnsupportedModelError(f"ALiBi needs at least one head, got {num_heads}")
    if kind == "mpt":
        p2 = 2 ** math.ceil(math.log2(num_heads))
        slopes = 1.0 / 2.0 ** (np.arange(1, p2 + 1) * (alibi_bias_max / p2))
        if p2 != num_heads:
            slopes = np.concatenate([slopes[1::2], slopes[::2]])[:num_heads]
        return slopes
    p2 = 2 ** math.floor(math.log2(num_heads))
    base = 2.0 ** (-(2.0 ** -(math.log2(p2) - 3)))
    slopes = base ** np.arange(1, p2 + 1)
    if p2 != num_heads:
        extra = 2.0 ** (-(2.0 ** -(math.log2(2 * p2) - 3)))
        remaining = min(p2, num_heads - p2)
        slopes = np.concatenate([slopes, extra ** np.arange(1, 1 + 2 * remaining, 2)])
    return slopes


def alibi_offsets(slopes: np.ndarray, n: int) -> np.ndarray:
    """The canonical ALiBi bias ``f_h(k) = -m_h |k|``, shape ``(heads, 2n - 1)``.

    For causal models this equals ``-m_h (i - j)`` on the keys a query may see
    (``k <= 0``); transformers adds ``m_h j`` instead, which differs by a
    per-row constant that the softmax ignores.
    """
    return -np.outer(np.asarray(slopes, dtype=np.float64), np.abs(offsets_axis(n)))


# ---- RoPE -----------------------------------------------------------------
@dataclass(frozen=True)
class RopeSpec:
    """Rotary frequencies of a model and how they were obtained."""

    inv_freq: np.ndarray
    attention_factor: float
    head_dim: int
    rotary_dim: int
    theta: float
    rope_type: str
    note: str = ""


def _rope_parameters(config: Mapping[str, Any]) -> dict[str, Any]:
    params = dict(config.get("rope_parameters") or {})
    legacy = config.get("rope_scaling") or {}
    for k, v in legacy.items():
        params.setdefault(k, v)
    if "type" in params and "rope_type" not in params:
        params["rope_type"] = params["type"]
    return params


def rope_spec(config: Mapping[str, Any]) -> RopeSpec:
    """Rotary inverse frequencies ``theta_i`` from a config dict.

    ``default``, ``linear`` and ``dynamic`` (which equals ``default`` within the
    trained length) use the closed form ``theta_i = base^(-2i / d_rot)``; other
    types (``llama3``, ``yarn``, ``longrope``, ...) go through transformers'
    ``ROPE_INIT_FUNCTIONS``.
    """
    params = _rope_parameters(config)
    heads = int(_first(config, _HEAD_KEYS, 0) or 0)
    hidden = _first(config, ("hidden_size", "n_embd", "d_model"))
    head_dim = config.get("head_dim") or (int(hidden) // heads if hidden and heads else None)
    if not head_dim:
        raise UnsupportedModelError("config.json lacks head_dim / hidden_size / num_attention_heads for RoPE")
    head_dim = int(head_dim)
    theta = float(_first(params, ("rope_theta",), None) or _first(config, ("rope_theta", "rotary_emb_base"), 10000.0))
    if config.get("rotary_dim"):  # GPT-J: rotated dimensions given directly
        rotary_dim = int(config["rotary_dim"])
    else:
        factor = _first(params, ("partial_rotary_factor",), None) or _first(config, ("partial_rotary_factor", "rotary_pct"), 1.0)
        rotary_dim = int(head_dim * float(factor))
    rope_type = str(params.get("rope_type", "default"))
    if rope_type in ("default", "linear", "dynamic"):
        inv_freq = 1.0 / theta ** (np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim)
        note = ""
        if rope_type == "linear":
            inv_freq = inv_freq / float(params["factor"])
            note = f"linear scaling, factor {params['factor']}"
        elif rope_type == "dynamic":
            note = "dynamic NTK scaling acts only beyond the trained length; frequencies at the base"
        return RopeSpec(inv_freq, 1.0, head_dim, rotary_dim, theta, rope_type, note)
    from transformers import AutoConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    if rope_type not in ROPE_INIT_FUNCTIONS:
        raise UnsupportedModelError(f"unknown rope_type {rope_type!r} in config.json")
    cfg = AutoConfig.for_model(**dict(config))
    inv, factor = ROPE_INIT_FUNCTIONS[rope_type](cfg, None)
    return RopeSpec(inv.double().numpy(), float(factor), head_dim, rotary_dim, theta, rope_type, "frequencies from transformers' ROPE_INIT_FUNCTIONS")


def rope_kernel_offsets(inv_freq: np.ndarray, n: int, attention_factor: float = 1.0) -> np.ndarray:
    """RoPE's content-free kernel ``f(k) = a^2 sum_i cos(k theta_i)``, shape ``(2n - 1,)``.

    This is the logit between two identical unit-pair query/key vectors ``k``
    positions apart (``a`` is the attention factor of YaRN-style scaling, else 1).
    """
    k = offsets_axis(n).astype(np.float64)
    return attention_factor**2 * np.cos(np.outer(k, np.asarray(inv_freq, dtype=np.float64))).sum(axis=1)


# ---- the model-level view --------------------------------------------------
@dataclass
class RelativeHeads:
    """Per-head positional matrices of a relative-scheme model, layer by layer.

    Build with :func:`open_relative`. ``layer(L)`` returns a
    :class:`~posviz.positional_scores.PositionalScores`; schemes whose matrices are shared
    by all layers compute them once.
    """

    scheme: str
    model: str
    source: str
    config: dict[str, Any]
    num_layers: int
    num_heads: int
    n: int
    first_position: int
    common: dict[str, Any]
    _build: Any = field(repr=False, default=None)  # layer -> (key, offsets or factors, conventions)
    _cache: dict[Any, Any] = field(repr=False, default_factory=dict)

    def check_layer(self, layer: int) -> int:
        """Validate a layer index."""
        if not 0 <= layer < self.num_layers:
            raise OptionError(f"--layer {layer} is out of range: {self.model} has {self.num_layers} layers (0-{self.num_layers - 1})")
        return layer

    def metadata(self) -> dict[str, Any]:
        """Model-level provenance."""
        return {
            "model": self.model,
            "source": self.source,
            "family": self.common.get("family"),
            "model_type": self.config.get("model_type"),
            "scheme": self.scheme,
            "positions": self.n,
            "rows": [self.first_position, self.first_position + self.n],
            "rows_note": self.common.get("rows_note", f"positions {self.first_position}-{self.first_position + self.n - 1}"),
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
        }

    def _entry(self, layer: int):
        self.check_layer(layer)
        key, make, conv = self._build(layer)
        if key not in self._cache:
            self._cache[key] = make()
        return key, self._cache[key], conv

    def conventions(self, layer: int) -> dict[str, Any]:
        """The conventions used for ``layer``."""
        return self._entry(layer)[2]

    def layer(self, layer: int) -> PositionalScores:
        """All heads of one layer."""
        _, stack, conv = self._entry(layer)
        out = PositionalScores(stack.form, stack.n, stack.heads, stack.left, stack.right, stack.offsets, stack.dense)
        out.meta = {**self.metadata(), **conv, "layer": layer}
        return out

    def score(self, layer: int, *, null_draws: int = 0, seed: int = 0, keep: bool = True) -> tuple[PositionalScores | None, ToeplitzScore]:
        """The layer's stack and per-head scores (computed once per distinct matrix; ``keep`` as in
        :meth:`posviz.extract.absolute.AbsoluteHeads.score`)."""
        from posviz.toeplitz.engine import score_layer

        key, stack, _ = self._entry(layer)
        skey = ("score", key, null_draws, seed)
        if skey not in self._cache:
            self._cache[skey] = score_layer(stack, null_draws=null_draws, seed=seed)
        return (self.layer(layer) if keep else None), self._cache[skey]


def _relative_positions(positions: slice | str | None, scheme: str) -> tuple[int, int]:
    from posviz.read.embeddings import parse_positions

    sl = parse_positions(positions) if isinstance(positions, str) or positions is None else positions
    start = 0 if sl is None or sl.start is None else int(sl.start)
    stop = start + DEFAULT_RELATIVE_POSITIONS if sl is None or sl.stop is None else int(sl.stop)
    if start < 0 or stop - start < 2:
        raise OptionError(f"--positions {start}:{stop} is empty, negative or shorter than 2", f"{scheme} needs A:B with 0 <= A < B - 1")
    return start, stop


def open_relative(
    source,
    family,
    *,
    ln: str = "ln",
    positions: slice | str | None = None,
    table: str | None = None,
) -> RelativeHeads:
    """Build the :class:`RelativeHeads` of a model whose family has no learned absolute table.

    Parameters
    ----------
    source
        A resolved :class:`~posviz.read.sources.Source`.
    family
        Its :class:`~posviz.read.families.Family`.
    ln
        DeBERTa only: ``ln`` applies the encoder LayerNorm to the relative
        embeddings when the config does (``norm_rel_ebd``), ``none`` uses them raw.
    positions
        ``A:B`` positions to show (Toeplitz schemes depend only on ``B - A``);
        default ``0:512``. Not used by DeBERTa (its rows are relative positions).
    table
        T5: ``encoder`` (default) or ``decoder``.
    """
    config = source.config
    mt = str(config.get("model_type"))
    if family.name == "t5":
        return _open_t5(source, config, positions, table)
    if table is not None:
        raise OptionError(f"--table does not apply to {mt} models")
    if family.name == "deberta":
        return _open_deberta(source, config, ln, positions)
    if family.scheme == "alibi" or (mt == "falcon" and config.get("alibi")):
        return _open_alibi(source, config, positions)
    if family.scheme == "rotary":
        return _open_rope(source, config, positions)
    raise UnsupportedModelError(f"no per-head positional matrices for model_type {mt!r}")


def _counts(config: Mapping[str, Any], layer_keys=_LAYER_KEYS, head_keys=_HEAD_KEYS) -> tuple[int, int]:
    layers, heads = _first(config, layer_keys), _first(config, head_keys)
    if layers is None or heads is None:
        raise UnsupportedModelError("config.json lacks the number of layers or heads")
    return int(layers), int(heads)


def _open_t5(source, config, positions, table) -> RelativeHeads:
    from posviz.extract.absolute import read_finite
    from posviz.read.checkpoints import Checkpoint

    side = table or "encoder"
    if side not in ("encoder", "decoder"):
        raise OptionError(f"T5 has no table {side!r}", "choose encoder or decoder")
    layers = int(config.get("num_layers", 0)) if side == "encoder" else int(config.get("num_decoder_layers") or config.get("num_layers", 0))
    heads = int(config["num_heads"])
    start, stop = _relative_positions(positions, "T5")
    n = stop - start
    ckpt = Checkpoint(source)
    num_buckets = int(config.get("relative_attention_num_buckets", 32))
    max_distance = int(config.get("relative_attention_max_distance", 128))
    bidirectional = side == "encoder"

    def tensor(layer: int) -> str | None:
        return ckpt.find(f"{side}.block.{layer}.layer.0.SelfAttention.relative_attention_bias.weight")

    shared = tensor(0)
    if shared is None:
        raise CheckpointError(f"{source.label}: no {side} relative_attention_bias in the checkpoint")

    def build(layer: int):
        name = tensor(layer) or shared  # UMT5 keeps one bias per layer; T5 and mT5 share block 0's

        def make():
            w = read_finite(ckpt, name)
            if w.shape != (num_buckets, heads):
                raise CheckpointError(f"{source.label}: {name} has shape {w.shape}, expected ({num_buckets}, {heads})")
            f = t5_bias_offsets(w, n, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance)
            return PositionalScores.from_offsets(f)

        conv = {
            "tensor": name,
            "shared_across_layers": name == shared and tensor(1) is None,
            "bidirectional": bidirectional,
            "num_buckets": num_buckets,
            "max_distance": max_distance,
            "buckets": "transformers T5Attention._relative_position_bucket(j - i)",
            "scale": 1.0,
            "scale_rule": "1 (T5 adds the bias to unscaled Q K^T)",
        }
        return name, make, conv

    common = {"family": "t5", "table": side}
    return RelativeHeads(f"T5 relative bucket bias ({side})", source.label, source.describe(), config, layers, heads, n, start, common, build)


def _open_alibi(source, config, positions) -> RelativeHeads:
    mt = str(config.get("model_type"))
    start, stop = _relative_positions(positions, "ALiBi")
    n = stop - start
    if mt == "mpt":
        attn = config.get("attn_config") or {}
        if attn.get("alibi") is False:
            raise UnsupportedModelError(f"{source.label}: this MPT model does not use ALiBi (attn_config.alibi is false)")
        layers, heads = _counts(config)
        bias_max = float(attn.get("alibi_bias_max", 8))
        kind, rule = "mpt", f"MPT's closed form (as transformers build_mpt_alibi_tensor), alibi_bias_max {bias_max:g}"
    else:
        layers, heads = _counts(config)
        bias_max = 8.0
        kind, rule = "bloom", "BLOOM's closed form (as transformers build_alibi_tensor)"
    slopes = alibi_slopes(heads, kind=kind, alibi_bias_max=bias_max)

    conv = {
        "slopes": [float(s) for s in slopes],
        "slope_rule": rule,
        "form": "-m_h |j - i|; causal: the model masks k = j - i > 0, and -m_h (i - j) is what it adds for k <= 0 (up to a per-row constant)",
        "causal": True,
        "shared_across_layers": True,
        "scale": 1.0,
        "scale_rule": "1 (the bias is added to the scaled Q K^T)",
    }

    def build(layer: int):
        return "alibi", lambda: PositionalScores.from_offsets(alibi_offsets(slopes, n)), conv

    common = {"family": "alibi"}
    return RelativeHeads("ALiBi linear distance bias", source.label, source.describe(), config, layers, heads, n, start, common, build)


def _open_rope(source, config, positions) -> RelativeHeads:
    start, stop = _relative_positions(positions, "RoPE")
    n = stop - start
    layers, heads = _counts(config)
    spec = rope_spec(config)
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

    def build(layer: int):
        def make():
            f = rope_kernel_offsets(spec.inv_freq, n, spec.attention_factor)
            return PositionalScores.from_offsets(np.tile(f, (heads, 1)))

        return "rope", make, conv

    common = {"family": "rotary"}
    return RelativeHeads("RoPE content-free kernel", source.label, source.describe(), config, layers, heads, n, start, common, build)


def _open_deberta(source, config, ln, positions) -> RelativeHeads:
    from posviz.extract.absolute import layer_norm, read_finite
    from posviz.read.checkpoints import Checkpoint

    if positions is not None:
        raise OptionError("--positions does not apply to DeBERTa", "its relative table is indexed by relative position")
    if not config.get("relative_attention", False):
        raise UnsupportedModelError(f"{source.label}: this DeBERTa model has relative_attention off (no relative embeddings)")
    ckpt = Checkpoint(source)
    name = ckpt.require("encoder.rel_embeddings.weight", "relative embeddings")
    buckets = int(config.get("position_buckets", -1) or -1)
    span = int(config.get("max_relative_positions", -1) or -1)
    if span < 1:
        span = int(config.get("max_position_embeddings", 512))
    if buckets > 0:
        span = buckets
    rows = min(ckpt.shape(name)[0], 2 * span)  # HF uses rel_embeddings[0 : 2 * att_span]
    layers, _ = _counts(config)
    norms: list[str] = []
    norm_rel = str(config.get("norm_rel_ebd", "none")).lower()

    def make():
        r = read_finite(ckpt, name, slice(0, rows))
        if ln != "none" and "layer_norm" in norm_rel:
            g, b = ckpt.require("encoder.LayerNorm.weight"), ckpt.require("encoder.LayerNorm.bias")
            r = layer_norm(r, read_finite(ckpt, g), read_finite(ckpt, b), float(config.get("layer_norm_eps", 1e-7)))
            norms[:] = [g, b]
        return PositionalScores.from_factors(r)

    stack_conv: dict[str, Any] = {
        "tensor": name,
        "ln": ln,
        "layer_norms": norms,
        "matrix": "Gram matrix R R^T of the relative embeddings (rows: relative positions -span .. span-1)",
        "shared_across_layers": True,
        "scale": 1.0,
        "scale_rule": "1",
    }

    def build(layer: int):
        return "deberta", make, stack_conv

    common = {"family": "deberta", "rows_note": f"rows 0-{rows - 1} of {ckpt.shape(name)[0]} (relative positions {-span}..{span - 1})"}
    heads = RelativeHeads("DeBERTa relative embeddings", source.label, source.describe(), config, layers, 1, rows, -span, common, build)
    return heads
