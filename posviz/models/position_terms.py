"""The positional scores a posviz model computes, as :class:`~posviz.positional_scores.PositionalScores`.

:func:`positional_scores` works on a live model or on a saved checkpoint (a run's
``checkpoint-N`` folder, any ``save_pretrained`` folder or hub id). For a
checkpoint only the tensors of the positional module (or, for absolute schemes,
of the embeddings and one layer's query/key) are read; the scheme's own
``nn.Module`` is then evaluated in float64, so the analysis reads exactly what
the model adds to its attention logits:

========================  ======================================================
scheme                    scores (per head, ``F[i, j]``, key ``j``, query ``i``)
========================  ======================================================
``tisa``, ``t5``,         ``f(j - i)`` as ``from_offsets``: exactly Toeplitz
``alibi``
``tupe-a``, ``tupe-r``    the untied positional term (+ TUPE-R buckets), dense,
                          [CLS] row and column included; the same in every layer
``absolute``              position-only logits of layer ``layer``, factored
                          (convention ``ln+type0`` by default)
``sinusoidal``            the same, with the fixed table computed from the config
``absolute+tisa``         the absolute part plus TISA's ``f(j - i)``, dense
``none``                  no positional scores (error)
``rope``                  no additive scores: RoPE rotates q and k (error; its
                          per-head bands: ``posviz heads``, :mod:`posviz.extract.rope`)
========================  ======================================================
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from posviz.errors import OptionError, UnsupportedModelError
from posviz.positional_scores import PositionalScores


@dataclass
class _Weights:
    """Float64 parameters of a model or checkpoint, looked up by name suffix."""

    config: Any
    get: Callable[[str], np.ndarray]
    label: str
    source: str


def _from_model(model) -> _Weights:
    import torch

    state = model.state_dict()

    def get(suffix: str) -> np.ndarray:
        hits = [k for k in state if k == suffix or k.endswith("." + suffix)]
        if not hits:
            raise KeyError(suffix)
        return state[min(hits, key=len)].detach().to("cpu", torch.float64).numpy()

    label = getattr(model.config, "_name_or_path", "") or type(model).__name__
    return _Weights(model.config, _with_fixed_table(model.config, get), label, f"model {type(model).__name__}")


def _from_checkpoint(spec) -> _Weights:
    from posviz.errors import CheckpointError
    from posviz.models.configuration_posviz import PosvizAlbertConfig
    from posviz.read.checkpoints import Checkpoint
    from posviz.read.sources import Source, resolve_source

    source = spec if isinstance(spec, Source) else resolve_source(spec)
    if source.config.get("model_type") != PosvizAlbertConfig.model_type:
        raise UnsupportedModelError(
            f"{source.label}: model_type {source.config.get('model_type')!r} is not {PosvizAlbertConfig.model_type!r}",
            "positional_scores reads models trained with `posviz train`",
        )
    cfg = {k: v for k, v in source.config.items() if k not in ("model_type", "transformers_version", "architectures")}
    try:
        config = PosvizAlbertConfig(**cfg)
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{source.label}: invalid config: {e}") from None
    ckpt = Checkpoint(source)

    def get(suffix: str) -> np.ndarray:
        return ckpt.read(ckpt.require(suffix, "parameter"))

    return _Weights(config, _with_fixed_table(config, get), source.label, source.describe())


#: The name the learned table has; a sinusoidal model's fixed table is looked up under it too.
TABLE = "embeddings.position_embeddings.weight"


def _with_fixed_table(config, get: Callable[[str], np.ndarray]) -> Callable[[str], np.ndarray]:
    """``get``, with the sinusoidal table (computed from the config, ``max_position_embeddings`` rows) under the learned table's name."""
    if not getattr(config, "uses_fixed_table", False):
        return get

    def with_table(suffix: str) -> np.ndarray:
        if suffix == TABLE:
            from posviz.read.embeddings import sinusoidal_embeddings

            return sinusoidal_embeddings(config.max_position_embeddings, config.embedding_size) * config.sinusoidal_scale
        return get(suffix)

    return with_table


def _weights(model) -> _Weights:
    from posviz.read.sources import Source

    if isinstance(model, Source):  # already resolved: a run stays pinned to the checkpoint chosen once
        return _from_checkpoint(model)
    if isinstance(model, (str, os.PathLike)):
        return _from_checkpoint(os.fspath(model))
    return _from_model(model)


def _scheme_module(w: _Weights, index: int):
    """Rebuild positional module ``index`` from the config and load its tensors in float64."""
    import torch

    from posviz.schemes.modules import build_position_scores

    module = build_position_scores(w.config).to(torch.float64)
    state = {k: torch.from_numpy(w.get(f"encoder.position_scores.{index}.{k}")) for k in module.state_dict()}
    module.load_state_dict(state)
    return module.eval()


def position_table(model) -> np.ndarray | None:
    """The absolute position table E_P, rows = positions ``0 .. max-1`` (float64).

    For ``absolute`` and ``absolute+tisa`` this is the learned table added to the
    input, for ``sinusoidal`` the fixed one (computed from the config, for
    ``max_position_embeddings`` positions); for TUPE it is the table of the untied
    positional term without its first row (the extra [CLS]→others vector), so row
    ``i`` is position ``i``. Other schemes have no table: ``None``.
    """
    w = _weights(model)
    if w.config.has_position_table:
        return w.get(TABLE)
    if w.config.uses_tupe:
        return w.get("encoder.position_scores.0.position_embeddings.weight")[1:]
    return None


def positional_scores(
    model,
    *,
    layer: int = 0,
    n: int | None = None,
    convention: str = "ln+type0",
) -> PositionalScores:
    """Every head's positional scores of one layer, exactly as the model adds them.

    Parameters
    ----------
    model
        A :class:`~posviz.models.PosvizForMaskedLM`/:class:`~posviz.models.PosvizModel`,
        a checkpoint (folder such as ``RUN/checkpoint-N``, weight file, hub id), or an already
        resolved :class:`~posviz.read.sources.Source` (used as is, so a run is read at one checkpoint).
    layer
        Layer index (matters for unshared TISA and for absolute schemes).
    n
        Number of positions (default: ``max_position_embeddings``).
    convention
        For absolute schemes: how E_P enters the position-only logits
        (``none``, ``ln``, ``ln+type0``; see :mod:`posviz.schemes.modules.absolute`).

    Returns
    -------
    PositionalScores
        ``(heads, n, n)``: ``offsets`` for TISA/T5/ALiBi, ``dense`` for TUPE and
        absolute+TISA, ``factored`` for absolute. ``meta`` records the scheme,
        layer, whether the module is shared across layers, and the convention.

    Raises
    ------
    PosvizError
        Scheme ``none`` or ``rope``, ``layer`` or ``n`` out of range, unreadable checkpoint.

    Examples
    --------
    >>> from posviz.models import PosvizAlbertConfig, PosvizForMaskedLM
    >>> cfg = PosvizAlbertConfig(vocab_size=50, embedding_size=8, hidden_size=16, num_hidden_layers=2,
    ...                          num_attention_heads=2, intermediate_size=32, max_position_embeddings=12,
    ...                          position_scheme="tisa")
    >>> from posviz.toeplitz import score
    >>> s = positional_scores(PosvizForMaskedLM(cfg))
    >>> s.form, s.heads, s.n, score(s).toeplitzness.round(6).tolist()
    ('offsets', 2, 12, [1.0, 1.0])
    """
    import torch

    from posviz.schemes.modules.absolute import CONVENTIONS, absolute_head_factors

    w = _weights(model)
    cfg = w.config
    scheme = cfg.position_scheme
    if scheme == "none":
        raise UnsupportedModelError(f"{w.label}: position_scheme 'none' adds no positional scores")
    if scheme == "rope":
        raise UnsupportedModelError(f"{w.label}: position_scheme 'rope' rotates queries and keys and adds no positional scores",
                                    "`posviz heads` shows its per-head RoPE bands and probe profiles")
    if not 0 <= layer < cfg.num_hidden_layers:
        raise OptionError(f"layer {layer} is out of range", f"the model has layers 0-{cfg.num_hidden_layers - 1}")
    n = cfg.max_position_embeddings if n is None else int(n)
    if not 2 <= n <= cfg.max_position_embeddings:
        raise OptionError(f"n={n} positions is out of range", f"use 2 to {cfg.max_position_embeddings}")
    if convention not in CONVENTIONS:
        raise OptionError(f"unknown convention {convention!r}", f"use one of {', '.join(CONVENTIONS)}")
    shared = cfg.position_scores_shared
    meta: dict[str, Any] = {
        "model": w.label,
        "source": w.source,
        "scheme": scheme,
        "layer": layer,
        "n": n,
        "what": "positional part of each head's attention logits",
        "offset": "k = j - i (key minus query)",
    }
    if getattr(cfg, "is_causal", False):
        meta["causal"] = True  # the model masks k = j - i > 0: those entries never reach a softmax
    left = right = None
    if cfg.has_position_table:
        group = int(layer / (cfg.num_hidden_layers / cfg.num_hidden_groups))
        left, right = absolute_head_factors(
            w.get, group=group, heads=cfg.num_attention_heads, n=n, layer_norm_eps=cfg.layer_norm_eps, convention=convention
        )
        meta.update(convention=convention, scale=f"1/sqrt({cfg.head_dim})", layer_group=group)
        if cfg.uses_fixed_table:
            meta["table"] = "fixed sinusoidal (Vaswani et al.), computed from the config"
        if scheme in ("absolute", "sinusoidal"):
            return PositionalScores.from_factors(left, right, **meta, shared_across_layers=cfg.num_hidden_groups == 1)
    meta["shared_across_layers"] = shared
    module = _scheme_module(w, 0 if shared else layer)
    with torch.no_grad():
        if hasattr(module, "offsets") and left is None:
            return PositionalScores.from_offsets(module.offsets(n).numpy(), **meta)
        dense = module(n).numpy()
    if left is not None:  # absolute + TISA: both parts of the position-only logits
        dense = dense + np.einsum("hir,hjr->hij", left, right)
    if cfg.uses_tupe:
        meta.update(scale=f"1/sqrt(2*{cfg.head_dim})", cls_untied=True)
    return PositionalScores.from_dense(dense, **meta)
