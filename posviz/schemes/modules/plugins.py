"""Positional schemes from other packages: the ``posviz.schemes`` entry-point group.

A package adds a scheme by naming a class in its metadata::

    [project.entry-points."posviz.schemes"]
    fire = "posviz_fire:FireScores"

The entry point's name is the scheme's name (``posviz train --scheme fire``); a name posviz already has is ignored,
with a warning. The class is an ``nn.Module`` that adds a positional score to every head's attention logits, as
posviz's own TISA, T5 and ALiBi do (:mod:`posviz.schemes.modules`):

* ``__init__(self, config)``: a :class:`~posviz.models.PosvizAlbertConfig` (``num_attention_heads``,
  ``max_position_embeddings``, ``is_causal``, ...);
* ``forward(self, n) -> Tensor``: ``(heads, n, n)``, the score ``F[h, i, j]`` added to ``q_i . k_j / sqrt(d)`` before
  the softmax (query ``i``, key ``j``), in the dtype and on the device of the module's parameters or buffers;
* optionally ``offsets(self, n) -> Tensor`` ``(heads, 2n - 1)``: for a translation-invariant scheme, ``f(k)`` for
  ``k = j - i = -(n-1) .. n-1`` (the analysis then reads it as exactly Toeplitz);
* optionally ``reset_parameters(self)``: initialises its parameters when a model is built from scratch.

One module serves every layer (its parameters are saved under ``albert.encoder.position_scores.0``). A model of
such a scheme trains, saves and loads as any posviz model, and ``posviz heads``, ``attention``, ``hidden`` and
``extrapolate`` read it, wherever the package is installed. docs/extending.md has a worked example.
"""

from __future__ import annotations

import warnings
from typing import Any

from posviz.errors import PosvizError

GROUP = "posviz.schemes"
#: posviz's own schemes (``posviz.models.configuration_posviz.SCHEMES``, repeated here to keep this module import-light).
BUILT_IN = ("absolute", "none", "tisa", "absolute+tisa", "tupe-a", "tupe-r", "t5", "alibi", "rope", "sinusoidal")


class SchemePluginError(PosvizError):
    """A scheme registered by another package cannot be loaded or breaks the interface."""


def _entry_points() -> dict[str, Any]:
    from importlib.metadata import entry_points

    found = {}
    for ep in entry_points(group=GROUP):
        if ep.name in BUILT_IN:
            warnings.warn(f"the scheme plugin {ep.name!r} ({ep.value}) is ignored: posviz has a scheme of that name", stacklevel=3)
            continue
        found.setdefault(ep.name, ep)
    return found


def plugin_names() -> tuple[str, ...]:
    """Names of the schemes installed under the ``posviz.schemes`` entry-point group (nothing is imported)."""
    return tuple(sorted(_entry_points()))


def known_schemes() -> tuple[str, ...]:
    """posviz's schemes, then those of installed packages."""
    return BUILT_IN + plugin_names()


_LOADED: dict[str, type] = {}


def load_plugin(name: str) -> type:
    """The class registered as scheme ``name``.

    Raises
    ------
    SchemePluginError
        No package registers ``name``, or its module fails to import, or what it names is not a class.
    """
    if name in _LOADED:
        return _LOADED[name]
    ep = _entry_points().get(name)
    if ep is None:
        raise SchemePluginError(f"unknown scheme {name!r}", f"choose one of {', '.join(known_schemes())}")
    dist = getattr(getattr(ep, "dist", None), "name", None) or "an installed package"
    try:
        cls = ep.load()
    except Exception as e:  # noqa: BLE001 - whatever the plugin raises while importing, one line names it
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise SchemePluginError(f"the scheme plugin {name!r} ({ep.value}, from {dist}) failed to import: {type(e).__name__}: {first}",
                                "reinstall that package, or choose another --scheme") from None
    if not isinstance(cls, type) or not callable(getattr(cls, "forward", None)):
        raise SchemePluginError(f"the scheme plugin {name!r} ({ep.value}, from {dist}) is not an nn.Module class with forward(n)")
    _LOADED[name] = cls
    return cls


def is_plugin_module(module: Any) -> bool:
    """Whether ``module`` is an instance of a loaded plugin scheme (its ``reset_parameters`` initialises it)."""
    return type(module) in _LOADED.values()


def build_plugin(config: Any) -> Any:
    """The positional-score module of a plugin scheme, built from ``config``."""
    return load_plugin(config.position_scheme)(config)
