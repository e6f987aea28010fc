"""Configuration of the posviz ALBERT-style encoder with a choice of positional scheme.

The field names mirror :class:`transformers.AlbertConfig`, so an ALBERT config (and,
for ``position_scheme="absolute"``, its weights) maps across unchanged; the extra
fields choose and size the positional scheme (RoPE's ``rope_theta`` and
``partial_rotary_factor`` are transformers' names) and the attention mask
(``is_causal``: bidirectional masked LM or causal LM).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from transformers import PretrainedConfig

from posviz.read.families import POSVIZ_MODEL_TYPE
from posviz.schemes.modules.plugins import BUILT_IN, known_schemes, plugin_names

#: Positional schemes the model builder supports (besides those of other packages, :mod:`posviz.schemes.modules.plugins`).
SCHEMES: tuple[str, ...] = BUILT_IN

#: Schemes that add a learned absolute table E_P to the input (as ALBERT does).
ABSOLUTE_SCHEMES: tuple[str, ...] = ("absolute", "absolute+tisa")

#: Schemes with a learned table of ``max_position_embeddings`` rows: no longer sequence can run.
TABLE_SCHEMES: tuple[str, ...] = ("absolute", "absolute+tisa", "tupe-a", "tupe-r")

#: Model sizes for ``posviz train --size`` (base is ALBERT base: 12 layers, 768 hidden, 12 heads).
SIZES: dict[str, dict[str, int]] = {
    "tiny": dict(embedding_size=64, hidden_size=128, num_hidden_layers=4, num_attention_heads=4, intermediate_size=512),
    "small": dict(embedding_size=128, hidden_size=256, num_hidden_layers=6, num_attention_heads=4, intermediate_size=1024),
    "base": dict(embedding_size=128, hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
}

#: Head width of a shape given as ``LAYERSxWIDTH`` without its heads (that of tiny).
SHAPE_HEAD_DIM = 32
_SHAPE = re.compile(r"(\d+)x(\d+)(?:x(\d+))?")


def size_dimensions(size: str) -> dict[str, int]:
    """The dimensions of a model size: a named one (:data:`SIZES`) or a shape ``LAYERSxWIDTH[xHEADS]``.

    A shape follows tiny and small (``4x128`` is tiny, ``6x256x4`` small): heads of :data:`SHAPE_HEAD_DIM` dimensions
    unless ``HEADS`` is given, a feed-forward four times the width and, as in ALBERT, token embeddings of half the
    width projected up to it. So ``2x64`` is a model of 2 layers, 64 wide, with 2 heads of 32.

    Parameters
    ----------
    size
        ``tiny``, ``small``, ``base`` or a shape such as ``2x64`` or ``2x64x4``.

    Returns
    -------
    dict
        ``embedding_size``, ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads`` and ``intermediate_size``.

    Raises
    ------
    ValueError
        For an unknown name or a shape outside 1-48 layers and 16-4096 wide, or a width its heads do not divide.
    """
    if size in SIZES:
        return dict(SIZES[size])
    match = _SHAPE.fullmatch(size)
    if match is None:
        raise ValueError(f"unknown size {size!r}: one of {', '.join(SIZES)}, or LAYERSxWIDTH[xHEADS] such as 2x64")
    layers, width = int(match[1]), int(match[2])
    heads = int(match[3]) if match[3] else max(1, width // SHAPE_HEAD_DIM)
    if not (1 <= layers <= 48 and 16 <= width <= 4096):
        raise ValueError(f"size {size!r}: a shape has 1 to 48 layers and a width of 16 to 4096")
    if not (1 <= heads <= width and width % heads == 0):
        raise ValueError(f"size {size!r}: {heads} heads do not divide a width of {width}")
    return dict(embedding_size=width // 2, hidden_size=width, num_hidden_layers=layers, num_attention_heads=heads,
                intermediate_size=4 * width)


class PosvizAlbertConfig(PretrainedConfig):
    """ALBERT-style encoder configuration with a ``position_scheme``.

    Parameters
    ----------
    vocab_size, embedding_size, hidden_size, num_hidden_layers, num_hidden_groups, num_attention_heads,
    intermediate_size, inner_group_num, hidden_act, hidden_dropout_prob, attention_probs_dropout_prob,
    max_position_embeddings, type_vocab_size, initializer_range, layer_norm_eps
        As in :class:`transformers.AlbertConfig` (factorised embeddings of size
        ``embedding_size`` mapped to ``hidden_size``; ``num_hidden_groups=1`` shares
        one layer's weights across all layers). ``max_position_embeddings`` is the
        length the model trains at, the size of E_P and of the TUPE table, and
        the longest sequence of the schemes with a learned table
        (:data:`TABLE_SCHEMES`; the others run at any length).
    position_scheme
        ``absolute`` (learned E_P added to the input, the ALBERT baseline),
        ``none``, ``tisa`` (TISA without E_P), ``absolute+tisa`` (TISA beside E_P,
        the TISA paper's variant a), ``tupe-a``, ``tupe-r`` (TUPE with T5 buckets),
        ``t5`` (T5 bucket bias), ``alibi`` (ALiBi: symmetric, Press et al.'s
        causal ALiBi under ``is_causal``), ``rope`` (rotary embeddings of q and
        k, rotate-half pairing) or ``sinusoidal`` (the fixed table of Vaswani et
        al. added to the input, not trained).
    tisa_kernels
        TISA kernels ``S`` per head (3 parameters each).
    tisa_shared
        One TISA module for all layers (``True``) or one per layer (``False``);
        ``None`` shares it exactly when the layer weights are shared
        (``num_hidden_groups == 1``).
    relative_attention_num_buckets, relative_attention_max_distance
        T5 buckets for ``tupe-r`` and ``t5`` (bidirectional; ``t5`` takes T5's
        unidirectional decoder buckets when ``is_causal``).
    rope_theta
        RoPE base: band ``i`` turns by ``rope_theta^(-2i / d_rot)`` per position.
    partial_rotary_factor
        Share of each head's dimensions that rotate (GPT-NeoX's ``rotary_pct``):
        ``d_rot = int(head_dim * partial_rotary_factor)``, which must be even.
    sinusoidal_scale
        ``sinusoidal`` only: the fixed table is multiplied by this before it is added
        to the word embeddings. Default ``sqrt(2) * initializer_range``: the table's
        per-element root mean square (1/sqrt(2) unscaled) then equals the word
        embeddings' initial standard deviation, so neither swamps the other under the
        embedding LayerNorm (the Transformer reaches the same balance by scaling its
        embeddings by sqrt(d)).
    is_causal
        Causal attention (query ``i`` sees keys ``j <= i``): the causal-LM
        objective. ``False`` (the default) is the bidirectional masked LM.
    """

    model_type = POSVIZ_MODEL_TYPE

    def __init__(
        self,
        vocab_size: int = 30000,
        embedding_size: int = 128,
        hidden_size: int = 768,
        num_hidden_layers: int = 12,
        num_hidden_groups: int = 1,
        num_attention_heads: int = 12,
        intermediate_size: int = 3072,
        inner_group_num: int = 1,
        hidden_act: str = "gelu_new",
        hidden_dropout_prob: float = 0.0,
        attention_probs_dropout_prob: float = 0.0,
        max_position_embeddings: int = 512,
        type_vocab_size: int = 2,
        initializer_range: float = 0.02,
        layer_norm_eps: float = 1e-12,
        position_scheme: str = "absolute",
        tisa_kernels: int = 5,
        tisa_shared: bool | None = None,
        relative_attention_num_buckets: int = 32,
        relative_attention_max_distance: int = 128,
        rope_theta: float = 10000.0,
        partial_rotary_factor: float = 1.0,
        is_causal: bool = False,
        sinusoidal_scale: float | None = None,
        pad_token_id: int | None = 0,
        bos_token_id: int | None = 2,
        eos_token_id: int | None = 3,
        tie_word_embeddings: bool = True,
        **kwargs: Any,
    ) -> None:
        if position_scheme not in SCHEMES and position_scheme not in plugin_names():
            raise ValueError(f"position_scheme must be one of {', '.join(known_schemes())}, got {position_scheme!r}")
        if hidden_size % num_attention_heads:
            raise ValueError(f"hidden_size {hidden_size} is not a multiple of num_attention_heads {num_attention_heads}")
        if num_hidden_layers % num_hidden_groups:
            raise ValueError(f"num_hidden_layers {num_hidden_layers} is not a multiple of num_hidden_groups {num_hidden_groups}")
        if tisa_kernels < 1:
            raise ValueError("tisa_kernels must be at least 1")
        if relative_attention_num_buckets < 2 or relative_attention_num_buckets % 2:
            raise ValueError("relative_attention_num_buckets must be even (bidirectional buckets)")
        if not rope_theta > 1:
            raise ValueError(f"rope_theta must be above 1, got {rope_theta}")
        if not 0 < partial_rotary_factor <= 1:
            raise ValueError(f"partial_rotary_factor must be above 0 and at most 1, got {partial_rotary_factor}")
        rotary_dim = int(hidden_size // num_attention_heads * partial_rotary_factor)
        if position_scheme == "rope" and (rotary_dim < 2 or rotary_dim % 2):
            raise ValueError(f"partial_rotary_factor {partial_rotary_factor} rotates {rotary_dim} of the "
                             f"{hidden_size // num_attention_heads} dims of a head; RoPE needs an even number, at least 2")
        self.vocab_size = vocab_size
        self.embedding_size = embedding_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_hidden_groups = num_hidden_groups
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.inner_group_num = inner_group_num
        self.hidden_act = hidden_act
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.max_position_embeddings = max_position_embeddings
        self.type_vocab_size = type_vocab_size
        self.initializer_range = initializer_range
        self.layer_norm_eps = layer_norm_eps
        self.position_scheme = position_scheme
        self.tisa_kernels = tisa_kernels
        self.tisa_shared = tisa_shared
        self.relative_attention_num_buckets = relative_attention_num_buckets
        self.relative_attention_max_distance = relative_attention_max_distance
        self.rope_theta = float(rope_theta)
        self.partial_rotary_factor = float(partial_rotary_factor)
        self.is_causal = bool(is_causal)
        self.sinusoidal_scale = math.sqrt(2) * initializer_range if sinusoidal_scale is None else float(sinusoidal_scale)
        if not self.sinusoidal_scale > 0:
            raise ValueError(f"sinusoidal_scale must be positive, got {sinusoidal_scale}")
        self.tie_word_embeddings = tie_word_embeddings
        super().__init__(pad_token_id=pad_token_id, bos_token_id=bos_token_id, eos_token_id=eos_token_id, **kwargs)

    # ---- derived facts used by the model and the analysis -------------------
    @property
    def head_dim(self) -> int:
        """Per-head size ``d_h``."""
        return self.hidden_size // self.num_attention_heads

    @property
    def uses_absolute_table(self) -> bool:
        """True when a learned E_P is added to the input embeddings."""
        return self.position_scheme in ABSOLUTE_SCHEMES

    @property
    def uses_fixed_table(self) -> bool:
        """True when the fixed sinusoidal table is added to the input embeddings (not a parameter)."""
        return self.position_scheme == "sinusoidal"

    @property
    def has_position_table(self) -> bool:
        """True when a table (learned or fixed) is added to the input: the schemes whose E_P posviz scores."""
        return self.uses_absolute_table or self.uses_fixed_table

    @property
    def position_limit(self) -> int | None:
        """The longest sequence the model runs: ``max_position_embeddings`` for learned tables, else ``None`` (any)."""
        return self.max_position_embeddings if self.position_scheme in TABLE_SCHEMES else None

    @property
    def rotary_dim(self) -> int:
        """Rotated dimensions of a head, ``int(head_dim * partial_rotary_factor)`` (``rope`` only)."""
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def uses_tupe(self) -> bool:
        """True for ``tupe-a`` and ``tupe-r``."""
        return self.position_scheme.startswith("tupe")

    @property
    def position_scores_shared(self) -> bool:
        """True when one positional-score module serves every layer (computed once per forward)."""
        if self.position_scheme in ("tisa", "absolute+tisa"):
            return self.num_hidden_groups == 1 if self.tisa_shared is None else bool(self.tisa_shared)
        return True

    @property
    def num_position_score_modules(self) -> int:
        """Number of positional-score modules (0 for ``absolute``, ``none``, ``rope`` and ``sinusoidal``)."""
        if self.position_scheme in ("absolute", "none", "rope", "sinusoidal"):
            return 0
        return 1 if self.position_scores_shared else self.num_hidden_layers

    @classmethod
    def from_albert(cls, albert_config: Any, **overrides: Any) -> PosvizAlbertConfig:
        """The equivalent config of an ALBERT config (an ``AlbertConfig`` or its dict).

        With ``position_scheme="absolute"`` (the default) the resulting model has
        exactly ALBERT's parameter names, so an ALBERT state dict loads into it.
        """
        src: Mapping[str, Any] = albert_config if isinstance(albert_config, Mapping) else albert_config.to_dict()
        keep = (
            "vocab_size", "embedding_size", "hidden_size", "num_hidden_layers", "num_hidden_groups",
            "num_attention_heads", "intermediate_size", "inner_group_num", "hidden_act", "hidden_dropout_prob",
            "attention_probs_dropout_prob", "max_position_embeddings", "type_vocab_size", "initializer_range",
            "layer_norm_eps", "pad_token_id", "bos_token_id", "eos_token_id", "tie_word_embeddings",
        )
        return cls(**{k: src[k] for k in keep if k in src}, **overrides)
