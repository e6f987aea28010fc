"""How transformers 4.44–5.x spell RoPE scaling settings: the shims of ``posviz extrapolate``, beside :mod:`posviz.util.compat`.

They are the same kind of shim as :mod:`posviz.util.compat` (a difference between the
supported transformers releases, asked here instead of testing versions), kept in a
module of their own: the shipped training experiments depend on ``compat.py``, and
would otherwise count as stale after a change to code they never call. Heavy
libraries are imported inside the functions.
"""

from __future__ import annotations

from typing import Any


def rope_scaling_types() -> frozenset[str]:
    """The RoPE scaling types the installed transformers implements (``linear``, ``dynamic``, ``yarn``, ...).

    ``transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS`` lists them in 4.44 and
    in 5.x alike (4.x also lists ``default``, the unscaled frequencies).
    """
    try:
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    except ImportError:  # pragma: no cover - every supported release has it
        return frozenset()
    return frozenset(ROPE_INIT_FUNCTIONS) - {"default"}


def set_rope_scaling(config: Any, params: dict[str, Any]) -> None:
    """Give ``config`` the RoPE scaling ``params`` (``rope_type``, ``factor``, ...), as the installed transformers reads it.

    transformers 5 keeps every RoPE setting in ``config.rope_parameters`` (``rope_theta``
    included, and ``original_max_position_embeddings`` required by YaRN); 4.x reads
    ``config.rope_scaling`` beside ``config.rope_theta``, and its YaRN takes the
    original length from ``max_position_embeddings``, so that key is left out there
    (4.44 would warn that it does not know it).
    """
    current = getattr(config, "rope_parameters", None)
    if isinstance(current, dict):  # transformers 5
        kept = {k: v for k, v in current.items() if k in ("rope_theta", "partial_rotary_factor")}
        config.rope_parameters = {**kept, **params}
        return
    legacy = dict(params)
    if legacy.get("rope_type") == "yarn":
        legacy.pop("original_max_position_embeddings", None)
    config.rope_scaling = legacy
