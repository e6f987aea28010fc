"""Rotary position embeddings (RoPE, Su et al., 2021): frequencies and the content-free kernel.

RoPE rotates each pair ``(2i, 2i+1)`` of the first ``d_rot`` query/key dimensions
by ``p * theta_i``. Two identical unit-pair vectors ``k`` positions apart then
score ``f(k) = a^2 sum_i cos(k theta_i)`` (``a``: the attention factor of
YaRN-style scaling, else 1): the kernel the analysis shows. The inverse
frequencies ``theta_i`` of every ``rope_type`` follow transformers'
``ROPE_INIT_FUNCTIONS`` formula by formula, in float64 (the tests compare both),
as transformers 5 has them whichever version is installed (4.x's YaRN and
LongRoPE differ; see docs/heads.md). See ARCHITECTURE.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from posviz.errors import UnsupportedModelError
from posviz.read.families import HEAD_KEYS, config_value
from posviz.schemes.offsets import offset_axis


@dataclass(frozen=True)
class RopeSpec:
    """Rotary frequencies of a model and how they were obtained.

    Attributes
    ----------
    inv_freq
        ``theta_i``, one per rotated pair, float64.
    attention_factor
        Scale of cos/sin (YaRN, LongRoPE), else 1.
    head_dim, rotary_dim
        Head width and how many of its dimensions rotate.
    theta
        The base ``rope_theta``.
    rope_type
        ``default``, ``linear``, ``dynamic``, ``llama3``, ``yarn``, ``longrope`` or ``proportional``.
    note
        What the frequencies are, when not the plain closed form.
    """

    inv_freq: np.ndarray
    attention_factor: float
    head_dim: int
    rotary_dim: int
    theta: float
    rope_type: str
    note: str = ""


def rope_parameters(config: Mapping[str, Any]) -> dict[str, Any]:
    """``rope_parameters`` merged with the legacy ``rope_scaling`` (``type`` read as ``rope_type``)."""
    params = dict(config.get("rope_parameters") or {})
    for k, v in (config.get("rope_scaling") or {}).items():
        params.setdefault(k, v)
    if "type" in params and "rope_type" not in params:
        params["rope_type"] = params["type"]
    return params


def _powers(theta: float, dim: int, denominator: int | None = None) -> np.ndarray:
    return theta ** (np.arange(0, dim, 2, dtype=np.float64) / (denominator or dim))


def base_frequencies(theta: float, dim: int, denominator: int | None = None) -> np.ndarray:
    """``theta^(-2i / denominator)`` for ``i = 0 .. dim/2 - 1`` (``denominator`` defaults to ``dim``)."""
    return 1.0 / _powers(theta, dim, denominator)


def original_length(config: Mapping[str, Any]) -> int | None:
    """``original_max_position_embeddings`` of a RoPE model that scales its positions, the length it was trained at,
    or None. As transformers' ``standardize_rope_params`` reads it: a top-level value wins (Phi-3), then
    ``rope_parameters`` (transformers 5), then ``rope_scaling`` (4.x)."""
    value = config_value(config, ("original_max_position_embeddings",))
    if value is None:
        for key in ("rope_parameters", "rope_scaling"):
            params = config.get(key)
            if isinstance(params, Mapping) and params.get("original_max_position_embeddings"):
                value = params["original_max_position_embeddings"]
                break
    return None if value is None or int(value) <= 0 else int(value)


def _original_max(config: Mapping[str, Any], params: Mapping[str, Any]) -> int:
    # transformers' standardize_rope_params: a top-level value wins, then the parameters, then the model's maximum
    return int(original_length(config) or params.get("original_max_position_embeddings") or config["max_position_embeddings"])


def _extension(params: Mapping[str, Any], config: Mapping[str, Any]) -> tuple[int, float, float | None]:
    """Original length, extension factor and the attention factor if given (YaRN, LongRoPE)."""
    old_len = _original_max(config, params)
    factor = params.get("factor") or config["max_position_embeddings"] / old_len
    return old_len, factor, params.get("attention_factor")


def _llama3(spec: RopeSpec, params: Mapping[str, Any], config: Mapping[str, Any]) -> tuple[np.ndarray, float]:
    inv = base_frequencies(spec.theta, spec.rotary_dim)
    factor, low, high = float(params["factor"]), float(params["low_freq_factor"]), float(params["high_freq_factor"])
    old_len = _original_max(config, params)
    wavelen = 2 * math.pi / inv
    scaled = np.where(wavelen > old_len / low, inv / factor, inv)  # long waves: divided by factor
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < old_len / high) & ~(wavelen > old_len / low)
    return np.where(medium, smoothed, scaled), 1.0


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _yarn(spec: RopeSpec, params: Mapping[str, Any], config: Mapping[str, Any]) -> tuple[np.ndarray, float]:
    dim, base = spec.rotary_dim, spec.theta
    old_len, factor, attention_factor = _extension(params, config)
    if attention_factor is None:
        mscale, mscale_all = params.get("mscale"), params.get("mscale_all_dim")
        use_both = bool(mscale and mscale_all)
        attention_factor = _yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all) if use_both else _yarn_mscale(factor)

    def correction_dim(rotations: float) -> float:  # the dimension that turns `rotations` times over old_len
        return (dim * math.log(old_len / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(params.get("beta_fast") or 32), correction_dim(params.get("beta_slow") or 1)
    if params.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / ((high + 0.001 if low == high else high) - low), 0, 1)
    extrapolation = 1 - ramp  # 1: keep the frequency, 0: interpolate (divide by factor)
    freqs = _powers(base, dim)
    return (1.0 / (factor * freqs)) * (1 - extrapolation) + (1.0 / freqs) * extrapolation, float(attention_factor)


def _longrope(spec: RopeSpec, params: Mapping[str, Any], config: Mapping[str, Any]) -> tuple[np.ndarray, float]:
    old_len, factor, attention_factor = _extension(params, config)
    if attention_factor is None:
        attention_factor = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(old_len))
    # within the original length (no sequence length given) transformers uses the short factors
    ext = np.asarray(params["short_factor"], dtype=np.float64)
    return 1.0 / (ext * _powers(spec.theta, spec.rotary_dim)), float(attention_factor)


def _proportional(spec: RopeSpec, params: Mapping[str, Any], config: Mapping[str, Any]) -> tuple[np.ndarray, float]:
    # rotated pairs use the head width as denominator; the others keep frequency 0
    angles = int(float(params.get("partial_rotary_factor", 1.0)) * spec.head_dim // 2)
    inv = np.zeros(spec.head_dim // 2)
    inv[:angles] = base_frequencies(spec.theta, 2 * angles, spec.head_dim)
    return inv / float(params.get("factor", 1.0)), 1.0


#: ``rope_type`` -> ``(spec, parameters, config) -> (inv_freq, attention_factor)`` beyond the closed forms.
_SCALED: dict[str, Callable[[RopeSpec, Mapping[str, Any], Mapping[str, Any]], tuple[np.ndarray, float]]] = {
    "llama3": _llama3,
    "yarn": _yarn,
    "longrope": _longrope,
    "proportional": _proportional,
}
ROPE_TYPES: tuple[str, ...] = ("default", "linear", "dynamic", *_SCALED)


def _head_dim(config: Mapping[str, Any]) -> int:
    heads = int(config_value(config, HEAD_KEYS, 0) or 0)
    hidden = config_value(config, ("hidden_size", "n_embd", "d_model"))
    head_dim = config.get("head_dim") or (int(hidden) // heads if hidden and heads else None)
    if not head_dim:
        raise UnsupportedModelError("config.json lacks head_dim / hidden_size / num_attention_heads for RoPE")
    return int(head_dim)


def layer_type(config: Mapping[str, Any], layer: int) -> str | None:
    """``sliding_attention`` or ``full_attention`` for models that alternate them (Gemma 2/3), else ``None``."""
    types = config.get("layer_types")
    if types:
        return str(types[layer])
    pattern = config.get("sliding_window_pattern") or config.get("_sliding_window_pattern")
    if pattern and config.get("rope_local_base_freq"):
        return "sliding_attention" if (layer + 1) % int(pattern) else "full_attention"
    return None


def layer_config(config: Mapping[str, Any], layer: int) -> dict[str, Any]:
    """The config as one layer's rotary embedding reads it.

    Gemma 3 gives sliding-window layers their own rotary parameters: transformers 5
    nests ``rope_parameters`` by layer type; earlier configs give the local layers
    ``rope_local_base_freq`` with no scaling.
    """
    out = dict(config)
    kind = layer_type(config, layer)
    params = config.get("rope_parameters")
    if isinstance(params, Mapping) and params and all(isinstance(v, Mapping) for v in params.values()):
        chosen = params.get(kind or "full_attention") or next(iter(params.values()))
        out["rope_parameters"] = dict(chosen)
        out.pop("rope_scaling", None)
    elif kind == "sliding_attention" and config.get("rope_local_base_freq"):
        out.update(rope_parameters=None, rope_scaling=None, rope_theta=float(config["rope_local_base_freq"]))
    return out


def rope_spec(config: Mapping[str, Any], layer: int = 0) -> RopeSpec:
    """Rotary inverse frequencies ``theta_i`` of a model, from its config dict.

    ``default``, ``linear`` and ``dynamic`` (which equals ``default`` within the
    trained length) use the closed form ``theta_i = base^(-2i / d_rot)``;
    ``llama3``, ``yarn``, ``longrope`` and ``proportional`` the formulas of
    transformers' ``ROPE_INIT_FUNCTIONS`` at the trained length. Partial rotary:
    GPT-J ``rotary_dim``, GPT-NeoX ``rotary_pct``, Phi ``partial_rotary_factor``.
    ``layer`` matters only for models whose layer types differ (:func:`layer_config`).

    Raises
    ------
    UnsupportedModelError
        Missing sizes or an unknown ``rope_type``.
    """
    config = layer_config(config, layer)
    params = rope_parameters(config)
    head_dim = _head_dim(config)
    theta = float(config_value(params, ("rope_theta",), None) or config_value(config, ("rope_theta", "rotary_emb_base"), 10000.0))
    if config.get("rotary_dim"):  # GPT-J: rotated dimensions given directly
        rotary_dim = int(config["rotary_dim"])
        partial = rotary_dim / head_dim
    else:
        partial = float(config_value(params, ("partial_rotary_factor",), None) or config_value(config, ("partial_rotary_factor", "rotary_pct"), 1.0))
        rotary_dim = int(head_dim * partial)
    rope_type = str(params.get("rope_type", "default"))
    spec = RopeSpec(base_frequencies(theta, rotary_dim), 1.0, head_dim, rotary_dim, theta, rope_type)
    if rope_type == "default":
        return spec
    if rope_type == "linear":
        inv = spec.inv_freq / float(params["factor"])
        return RopeSpec(inv, 1.0, head_dim, rotary_dim, theta, rope_type, f"linear scaling, factor {params['factor']}")
    if rope_type == "dynamic":
        return RopeSpec(spec.inv_freq, 1.0, head_dim, rotary_dim, theta, rope_type,
                        "dynamic NTK scaling acts only beyond the trained length; frequencies at the base")
    if rope_type not in _SCALED:
        raise UnsupportedModelError(f"unknown rope_type {rope_type!r} in config.json", f"posviz knows {', '.join(ROPE_TYPES)}")
    inv, attention_factor = _SCALED[rope_type](spec, {**params, "partial_rotary_factor": partial}, config)
    note = f"{rope_type} frequencies at the trained length (transformers' ROPE_INIT_FUNCTIONS formulas, float64)"
    return RopeSpec(inv, attention_factor, head_dim, rotary_dim, theta, rope_type, note)


def kernel_offsets(inv_freq: np.ndarray, n: int, attention_factor: float = 1.0) -> np.ndarray:
    """RoPE's content-free kernel ``f(k) = a^2 sum_i cos(k theta_i)``, shape ``(2n - 1,)``.

    This is the logit between two identical unit-pair query/key vectors ``k``
    positions apart (``a`` is the attention factor of YaRN-style scaling, else 1).
    """
    k = offset_axis(n).astype(np.float64)
    return attention_factor**2 * np.cos(np.outer(k, np.asarray(inv_freq, dtype=np.float64))).sum(axis=1)



#: Where :func:`trained_context` looks, in order: a scaled model's original length first.
CONTEXT_KEYS: tuple[str, ...] = ("original_max_position_embeddings", "max_position_embeddings", "n_positions")


def trained_context(config: Mapping[str, Any], layer: int = 0) -> tuple[int | None, str | None]:
    """The trained context length ``T`` of a RoPE model and the config key it came from.

    ``original_max_position_embeddings`` (top level, then ``rope_parameters`` /
    ``rope_scaling``, as :func:`rope_spec` reads it for YaRN, LongRoPE and llama3)
    wins where present: a scaled model's own maximum is the length it was stretched
    to, not the one it was trained at. Then ``max_position_embeddings`` (GPT-J:
    ``n_positions``). ``(None, None)`` when the config has none of them.
    """
    config = layer_config(config, layer)
    params = rope_parameters(config)
    for key in CONTEXT_KEYS:
        value = config.get(key) if config.get(key) is not None else params.get(key)
        if value is not None and int(value) > 0:
            return int(value), key
    return None, None


def critical_dimension(rotary_dim: int, base: float, context: int) -> int:
    """Liu et al.'s critical dimension ``d_extra = 2 ceil((d/2) log_base(T / 2 pi))``, clipped to ``[0, d]``.

    The rotated dimensions whose period ``2 pi base^(2n/d)`` is at most ``T`` turn
    through a full rotation within the trained context; the others do not ("Scaling
    Laws of RoPE-based Extrapolation", ICLR 2024: LLaMA-2's ``d = 128``, ``T = 4096``,
    base 10000 give 92). ``d`` is the rotary width and ``base`` the unscaled
    ``rope_theta``, as in the paper.
    """
    x = rotary_dim / 2 * math.log(context / (2 * math.pi)) / math.log(base)
    return int(min(rotary_dim, max(0, 2 * math.ceil(x))))
