"""One small module per positional scheme, each with ``forward(n) -> (heads, n, n)``.

The tensor returned is the positional part of every head's attention logits,
added to ``q k^T * scale`` before the softmax (``F[i, j]`` for query ``i`` and key
``j``; offsets ``k = j - i``). Translation-invariant schemes also expose
``offsets(n) -> (heads, 2n - 1)``, the values ``f(k)`` for ``k = -(n-1) .. n-1``,
which the analysis reads as an exactly Toeplitz :class:`~posviz.positional_scores.PositionalScores`.
The learned absolute table (``absolute``) and the fixed sinusoidal one
(``sinusoidal``, :mod:`posviz.schemes.modules.sinusoidal`) are added to the input
instead and have no such module; see :mod:`posviz.schemes.modules.absolute`.
RoPE (:mod:`posviz.schemes.modules.rope`) rotates q and k rather than adding a
score, so it has none either.

============  =======================================  ==========================
scheme        where positions enter                     longer than the training
============  =======================================  ==========================
absolute      learned table E_P + input                 ``ValueError``
absolute+tisa learned table + TISA's ``f(j - i)``       ``ValueError``
tupe-a/-r     untied term from a learned table          ``ValueError``
none          nowhere (NoPE under the causal mask)      any length
tisa, t5,     ``f(j - i)`` added to the logits          any length
alibi
rope          rotation of q and k                       any length
sinusoidal    fixed table + input                       any length
============  =======================================  ==========================

Fixed tables (T5 bucket ids, ALiBi slopes, TUPE-R bucket ids) are computed by
:mod:`posviz.schemes`, the numpy math the analysis uses too, and registered as
non-persistent buffers; a module that has them offers ``derived_buffers()``,
which the model's weight initialisation calls again. Schemes of other packages join through the ``posviz.schemes``
entry-point group (:mod:`posviz.schemes.modules.plugins`). See ARCHITECTURE.md.
"""

from __future__ import annotations

from torch import nn

from posviz.schemes.modules.alibi import AlibiScores
from posviz.schemes.modules.plugins import BUILT_IN, build_plugin
from posviz.schemes.modules.t5 import T5Scores
from posviz.schemes.modules.tisa import TisaScores
from posviz.schemes.modules.tupe import TupeScores

__all__ = ["AlibiScores", "T5Scores", "TisaScores", "TupeScores", "build_position_scores"]


def build_position_scores(config) -> nn.Module | None:
    """The positional-score module a config asks for (``None`` for ``absolute``, ``none``, ``rope``, ``sinusoidal``;
    a plugin scheme's class for a name posviz does not have).

    Parameters
    ----------
    config
        A :class:`~posviz.models.configuration_posviz.PosvizAlbertConfig`.
    """
    scheme = config.position_scheme
    heads = config.num_attention_heads
    if scheme in ("tisa", "absolute+tisa"):
        return TisaScores(heads, config.tisa_kernels)
    if config.uses_tupe:
        return TupeScores(
            config.hidden_size,
            heads,
            config.max_position_embeddings,
            layer_norm_eps=config.layer_norm_eps,
            relative=scheme == "tupe-r",
            num_buckets=config.relative_attention_num_buckets,
            max_distance=config.relative_attention_max_distance,
        )
    if scheme == "t5":
        return T5Scores(heads, config.max_position_embeddings, config.relative_attention_num_buckets,
                        config.relative_attention_max_distance, bidirectional=not getattr(config, "is_causal", False))
    if scheme == "alibi":
        return AlibiScores(heads)
    if scheme not in BUILT_IN:  # a scheme of another package (posviz.schemes entry points)
        return build_plugin(config)
    return None
