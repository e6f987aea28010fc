"""The one way from a checkpoint to per-head positional matrices: a registry of schemes.

Each entry of :data:`SCHEMES` is a scheme module's ``claims``, ``open_heads`` and
``describe``; :func:`open_heads` resolves the model, gives it to the scheme that
claims its family (claims are exclusive), and returns that scheme's
:class:`~posviz.extract.base.HeadsSource`. :func:`convention_line` asks every
scheme to describe a layer's conventions. See ARCHITECTURE.md (where a new
family or scheme plugs in).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from numbers import Integral
from typing import TYPE_CHECKING, Any

from posviz.errors import OptionError, UnsupportedModelError
from posviz.extract import absolute, alibi, deberta, posviz_trained, rope, t5
from posviz.extract.base import HeadsOptions, HeadsSource, SchemeModule, check_ln, refuse_synthetic
from posviz.read.families import Family

if TYPE_CHECKING:
    from posviz.read.sources import Source


@dataclass(frozen=True)
class Scheme:
    """One positional scheme as the registry sees it.

    Attributes
    ----------
    name
        Short name (``absolute``, ``t5``, ...).
    claims
        ``(family, config) -> bool``: whether this scheme analyses the model.
    open
        ``(source, family, options) -> HeadsSource``.
    describe
        ``conventions -> list of str``: this scheme's parts of the conventions
        line (empty for conventions of other schemes).
    """

    name: str
    claims: Callable[[Family, Mapping[str, Any]], bool]
    open: Callable[[Source, Family, HeadsOptions], HeadsSource]
    describe: Callable[[Mapping[str, Any]], list[str]]


def _entry(name: str, module: SchemeModule) -> Scheme:
    return Scheme(name, module.claims, module.open_heads, module.describe)


#: Every scheme, in the order their parts appear in a conventions line. Claims are exclusive: one scheme per family.
SCHEMES: tuple[Scheme, ...] = (
    _entry("absolute", absolute),
    _entry("posviz-trained", posviz_trained),
    _entry("t5", t5),
    _entry("alibi", alibi),
    _entry("rope", rope),
    _entry("deberta", deberta),
)


def scheme_for(family: Family, config: Mapping[str, Any]) -> Scheme:
    """The scheme that analyses a family (and config).

    Raises
    ------
    UnsupportedModelError
        If no scheme claims it.
    """
    for scheme in SCHEMES:
        if scheme.claims(family, config):
            return scheme
    raise UnsupportedModelError(f"no per-head positional matrices for model_type {str(config.get('model_type'))!r}")


def open_heads(
    model: str,
    *,
    ln: str = "ln",
    bias: bool = True,
    positions: slice | str | None = None,
    table: str | None = None,
    probe: str | None = None,
    context: int | None = None,
) -> HeadsSource:
    """Per-head positional matrices of any supported model, layer by layer.

    Absolute-position families give an :class:`~posviz.extract.absolute.AbsoluteHeads`
    (position-only ``Q K^T`` per head); T5, ALiBi, RoPE, DeBERTa and models trained
    by ``posviz train`` a :class:`~posviz.extract.cached.CachedHeads`. Both are
    :class:`~posviz.extract.base.HeadsSource`: ``num_layers``, ``num_heads``,
    ``n``, ``layer(L)``, ``score(L)``, ``metadata()``, ``conventions(L)``.

    Parameters
    ----------
    model
        Model folder, weight file or hub id.
    ln
        ``none``, ``ln`` or ``ln+type0``: how a learned table enters attention
        (DeBERTa: ``none`` leaves its relative embeddings un-normalised).
    bias
        Include the query/key projection biases (absolute models).
    positions
        ``A:B`` positions to keep; schemes without a table default to ``0:512``.
    table
        BART/mBART/T5: ``encoder`` or ``decoder``.
    probe
        RoPE models: content probe of the per-head profiles (default ``mean``; ``none`` for the
        weight-free kernel); other schemes refuse it.
    context
        RoPE models: the trained context length ``T`` (a positive integer) against which each
        band's wavelength is compared (``beyond_context_share``); default from the config
        (``original_max_position_embeddings``, else ``max_position_embeddings``). Other
        schemes refuse it.

    Raises
    ------
    PosvizError
        Bad options, a synthetic control, no ``config.json``, an unsupported model.
    """
    from posviz.read.families import family_for_config
    from posviz.read.sources import resolve_source

    check_ln(ln)
    if context is not None and (isinstance(context, bool) or not isinstance(context, Integral) or context < 1):
        raise OptionError(f"--context {context!r} is not a positive integer", "give the trained length in tokens, e.g. --context 4096")
    refuse_synthetic(model)
    source = resolve_source(model)
    if not source.config:
        raise UnsupportedModelError(f"{source.label}: no config.json beside the weights", "per-head maps need the model's config.json")
    family = family_for_config(source.config)
    options = HeadsOptions(ln=ln, bias=bias, positions=positions, table=table, probe=probe,
                           context=None if context is None else int(context))
    scheme = scheme_for(family, source.config)
    rope_run = scheme.name == "posviz-trained" and family.scheme == "rotary"
    for name, value in (("--probe", probe), ("--context", context)):
        if value is not None and scheme.name != "rope" and not rope_run:
            raise OptionError(f"{name} applies to RoPE models only, not to {source.config.get('model_type')}")
    return scheme.open(source, family, options)


def convention_line(c: Mapping[str, Any]) -> str:
    """One line stating a layer's conventions, for table footnotes and figure titles."""
    parts = [part for scheme in SCHEMES for part in scheme.describe(c)]
    if c.get("shared_across_layers"):
        parts.append("same for every layer")
    if c.get("scale_rule"):
        parts.append(f"scale {c['scale_rule']}")
    if c.get("rows_note"):
        parts.append(c["rows_note"])
    return "; ".join(parts)


def summary_convention_line(lines: list[str], layers: list[int]) -> str:
    """One conventions line for several layers (layer numbers in module names become L)."""
    if len(set(lines)) == 1:
        return lines[0]
    return lines[0].replace(f".{layers[0]}.", ".L.") + " (per layer L)"
