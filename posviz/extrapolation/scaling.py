"""RoPE-scaling what-ifs: the same checkpoint with transformers' own ``linear``, ``dynamic``, ``yarn`` or ``llama3`` scaling.

A variant is written ``TYPE:FACTOR`` (``--rope-scaling yarn:4``). It becomes the
scaling parameters transformers reads (``config.rope_parameters`` in 5.x,
``config.rope_scaling`` in 4.x: :func:`posviz.util.compat_rope.set_rope_scaling`), set on
the config before the weights are loaded, so the model computes its rotary
frequencies with transformers' own code. The parameters each type needs beyond the
factor take these defaults (the Llama 3.1 values for ``llama3``; YaRN's paper values
are transformers' own defaults, so none is set):

* ``original_max_position_embeddings`` (``yarn``, ``llama3``): the model's
  ``max_position_embeddings``, i.e. the length it was trained at;
* ``low_freq_factor`` 1 and ``high_freq_factor`` 4 (``llama3``).

``max_position_embeddings`` is left as it is: ``dynamic`` (NTK) scaling starts
rescaling past it, and transformers 4.x's YaRN reads the original length from it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from posviz.errors import OptionError, UnsupportedModelError
from posviz.observe.lengths import is_rope

#: Scaling types posviz can set up (each needs no parameter beyond the factor and the defaults above).
TYPES: tuple[str, ...] = ("linear", "dynamic", "yarn", "llama3")
#: ``llama3``'s frequency factors (Llama 3.1's ``rope_scaling``).
LLAMA3_LOW_FREQ_FACTOR = 1.0
LLAMA3_HIGH_FREQ_FACTOR = 4.0


@dataclass(frozen=True)
class RopeScaling:
    """One RoPE-scaling variant.

    Attributes
    ----------
    type
        ``linear``, ``dynamic``, ``yarn`` or ``llama3``.
    factor
        The scaling factor (at least 1).
    """

    type: str
    factor: float

    @property
    def label(self) -> str:
        """``TYPE:FACTOR`` as the option spells it (``yarn:4``)."""
        return f"{self.type}:{self.factor:g}"

    def parameters(self, original: int | None) -> dict[str, Any]:
        """The scaling parameters transformers reads, for a model trained at ``original`` positions."""
        params: dict[str, Any] = {"rope_type": self.type, "factor": float(self.factor)}
        if self.type in ("yarn", "llama3"):
            if original is None:
                raise UnsupportedModelError(f"--rope-scaling {self.label} needs the model's max_position_embeddings",
                                            "the config declares none")
            params["original_max_position_embeddings"] = int(original)
        if self.type == "llama3":
            params.update(low_freq_factor=LLAMA3_LOW_FREQ_FACTOR, high_freq_factor=LLAMA3_HIGH_FREQ_FACTOR)
        return params

    def apply(self, config: Any) -> None:
        """Set this scaling on a transformers config (before the weights are loaded)."""
        from posviz.util.compat_rope import set_rope_scaling

        set_rope_scaling(config, self.parameters(getattr(config, "max_position_embeddings", None)))


def parse_scaling(text: str) -> RopeScaling:
    """``TYPE:FACTOR`` → :class:`RopeScaling`.

    Raises
    ------
    OptionError
        Not of the form ``TYPE:FACTOR``, a type posviz does not set up or the installed
        transformers does not implement, or a factor that is not a finite number ≥ 1.
    """
    from posviz.util.compat_rope import rope_scaling_types

    kind, sep, factor_text = text.strip().partition(":")
    if not sep or not kind or not factor_text:
        raise OptionError(f"--rope-scaling {text!r} is not of the form TYPE:FACTOR", "for example --rope-scaling linear:2")
    if kind not in TYPES:
        raise OptionError(f"--rope-scaling: unknown scaling type {kind!r}", f"choose one of: {', '.join(TYPES)}")
    installed = rope_scaling_types()
    if kind not in installed:
        import transformers

        raise OptionError(f"--rope-scaling {kind}: the installed transformers {transformers.__version__} does not implement it",
                          f"it implements: {', '.join(sorted(installed)) or 'none'}")
    try:
        factor = float(factor_text)
    except ValueError:
        raise OptionError(f"--rope-scaling {text!r}: the factor {factor_text!r} is not a number") from None
    if not math.isfinite(factor) or factor < 1:
        raise OptionError(f"--rope-scaling {text!r}: the factor must be a finite number of at least 1")
    return RopeScaling(kind, factor)


def check_scalable(label: str, config: Mapping[str, Any], scalings: list[RopeScaling]) -> None:
    """Refuse RoPE-scaling variants of a model without rotary embeddings (before anything runs).

    Raises
    ------
    OptionError
        ``scalings`` given for a model that :func:`posviz.observe.lengths.is_rope` does not recognise.
    """
    from posviz.read.families import POSVIZ_MODEL_TYPE

    if scalings and config.get("model_type") == POSVIZ_MODEL_TYPE:
        raise OptionError(f"--rope-scaling applies to transformers' RoPE models; {label} is a posviz train run, whose "
                          "positional modules do not read transformers' scaling settings", "leave out --rope-scaling for it")
    if scalings and not is_rope(config):
        raise OptionError(f"--rope-scaling applies to RoPE models; {label} (model_type {config.get('model_type')!r}) has no "
                          "rotary position embeddings", "leave out --rope-scaling for this model")


def check_applied(model: Any, scaling: RopeScaling) -> None:
    """Check that the loaded model's rotary modules took ``scaling`` (their ``rope_type``).

    Raises
    ------
    UnsupportedModelError
        No rotary module (one with an ``inv_freq`` buffer) reports the type: the
        architecture does not read transformers' scaling settings.
    """
    types = {getattr(m, "rope_type", None) for m in model.modules() if hasattr(m, "inv_freq")}
    if scaling.type not in types:
        raise UnsupportedModelError(f"--rope-scaling {scaling.label}: {type(model).__name__} did not apply it "
                                    f"(its rotary modules report {sorted(map(str, types)) or 'none'})",
                                    "this architecture does not read transformers' rope scaling settings")
