"""RoPE models (LLaMA, Mistral, Qwen, Gemma, OLMo, Phi, GPT-NeoX, GPT-J, ...), per head, from their weights.

Each requested layer's query/key weights are read (nothing else but their norms
and, for the probe, the token embeddings; :mod:`posviz.extract.rope_weights`) and
give, per head,

* the band energy ``E[h, b]`` over the RoPE frequency bands (band 0: highest
  frequency) with its summaries (:mod:`posviz.schemes.rope_bands`), among them the
  share beyond the trained context ``T`` (bands whose wavelength exceeds ``T`` never
  turn fully within it, Liu et al., ICLR 2024; ``T`` from ``--context`` or the config);
* the content-probe profile ``f_h(k)``: the position-only logits of probe queries
  and keys ``k`` positions apart, an ``offsets`` stack that differs per head, with
  its peak offset, locality and previous-token weight.

``--probe none`` (or ``content-free``) keeps the weight-free kernel
``f(k) = sum_b cos(k theta_b)``, identical for every head and layer. Frequencies of
every ``rope_type`` and partial rotary: :mod:`posviz.schemes.rope`. Models trained
by ``posviz train --scheme rope`` come here too, through
:mod:`posviz.extract.posviz_trained` (their layout: :func:`posviz.read.rope_layouts.posviz_layout`).
See ARCHITECTURE.md and docs/definitions.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from posviz.extract import alibi
from posviz.extract.base import HeadsOptions, layer_head_counts, no_table, relative_positions
from posviz.extract.cached import CachedHeads
from posviz.extract.rope_probe import Probe, parse_probe, probe_input
from posviz.extract.rope_weights import Norm, read_layer
from posviz.positional_scores import PositionalScores
from posviz.read.families import POSVIZ_MODEL_TYPE, Family
from posviz.read.rope_layouts import RopeLayout, rope_layout
from posviz.schemes import rope, rope_bands

if TYPE_CHECKING:
    from posviz.read.checkpoints import Checkpoint
    from posviz.read.sources import Source

#: ``checkpoint -> (map, what)``: how a model's token embeddings become its first layer's input (before that
#: layer's input norm), for models where that is more than the embedding itself (ALBERT's factorised embeddings).
ProbeMap = Callable[["Checkpoint"], tuple[Callable[[np.ndarray], np.ndarray], str]]


def claims(family: Family, config: Mapping[str, Any]) -> bool:
    """The rotary family, except Falcon models built with ``alibi`` and posviz runs (their own scheme delegates here)."""
    return family.scheme == "rotary" and not alibi.claims(family, config) and POSVIZ_MODEL_TYPE not in family.model_types


def _spec_conventions(spec: rope.RopeSpec, causal: bool = True) -> dict[str, Any]:
    conv = {
        "rope_type": spec.rope_type,
        "rope_theta": spec.theta,
        "head_dim": spec.head_dim,
        "rotary_dim": spec.rotary_dim,
        "attention_factor": spec.attention_factor,
        "causal": causal,
    }
    if spec.note:
        conv["rope_note"] = spec.note
    return conv


def _context(config: Mapping[str, Any], given: int | None) -> tuple[int | None, str]:
    """The context ``T`` the bands are compared with, and where it came from (``--context`` or a config key)."""
    if given is not None:
        return given, "--context"
    value, key = rope.trained_context(config)
    if value is None:
        return None, "unknown: config.json has no max_position_embeddings; give --context N"
    return value, key or ""


def _context_conventions(spec: rope.RopeSpec, context: int | None, source: str) -> tuple[dict[str, Any], np.ndarray | None]:
    """The context fields of a layer's conventions and the bands beyond ``context`` (``None``: unknown).

    The wavelengths are those of ``spec.inv_freq``, the frequencies the model applies
    (scaling included), as ``band_wavelength`` gives them; ``critical_dimension`` is
    Liu et al.'s closed form from the rotary width and the unscaled base.
    """
    if context is None:
        return {"context": None, "context_source": source, "bands_beyond_context": None,
                "context_boundary_band": None, "critical_dimension": None}, None
    with np.errstate(divide="ignore"):
        beyond = rope_bands.beyond_context(2 * np.pi / spec.inv_freq, context)
    return {
        "context": context,
        "context_source": source,
        "bands_beyond_context": int(beyond.sum()),
        "context_boundary_band": rope_bands.context_boundary(beyond),
        "critical_dimension": rope.critical_dimension(spec.rotary_dim, spec.theta, context),
    }, beyond


def open_heads(source: Source, family: Family, options: HeadsOptions, *, probe_map: ProbeMap | None = None,
               causal: bool = True) -> CachedHeads:
    """Band usage and probe profiles per head, or the content-free kernel for ``--probe none``.

    ``probe_map`` (default: none) maps token embeddings to the first layer's input for
    the probe; ``causal`` says whether the model masks ``k > 0`` (every Hugging Face
    RoPE model does; a bidirectional ``posviz train`` run does not).
    """
    config = source.config
    no_table(options, config)
    start, stop = relative_positions(options.positions, "RoPE")
    n = stop - start
    layers, heads = layer_head_counts(config)
    spec = rope.rope_spec(config)
    probe = parse_probe(options.probe)
    context = _context(config, options.context)
    if probe.kind == "none":
        return _content_free(source, spec, layers, heads, n, start, context, causal)
    layout = rope_layout(config)
    plan = _WeightPlan(source, layout, spec, probe, heads, n, context, probe_map=probe_map, causal=causal)
    return CachedHeads(f"RoPE per-head bands and probe profiles ({probe.label})", source.label, source.describe(), config,
                       layers, heads, n, start, {"family": "rotary"}, plan)


def _content_free(source: Source, spec: rope.RopeSpec, layers: int, heads: int, n: int, start: int,
                  context: tuple[int | None, str], causal: bool = True) -> CachedHeads:
    conv = {
        **_spec_conventions(spec, causal),
        **_context_conventions(spec, *context)[0],  # no band energy here: the bands beyond T, not their share
        "probe": "content-free",
        "kernel": "sum_i cos(k theta_i) over the rotated pairs (content-free: identical unit-pair q and k); same for every head and layer",
        "shared_across_layers": True,
        "scale": 1.0,
        "scale_rule": "1 (kernel before the model's 1/sqrt(d_h))",
    }

    def make() -> PositionalScores:
        f = rope.kernel_offsets(spec.inv_freq, n, spec.attention_factor)
        return PositionalScores.from_offsets(np.tile(f, (heads, 1)))

    return CachedHeads("RoPE content-free kernel", source.label, source.describe(), source.config,
                       layers, heads, n, start, {"family": "rotary"}, lambda layer: ("rope", make, conv))


class _WeightPlan:
    """The :data:`~posviz.extract.cached.LayerPlan` of weight-based RoPE heads: one layer's weights read on demand."""

    def __init__(self, source: Source, layout: RopeLayout, spec: rope.RopeSpec, probe: Probe, heads: int, n: int,
                 context: tuple[int | None, str], *, probe_map: ProbeMap | None = None, causal: bool = True) -> None:
        from posviz.read.checkpoints import Checkpoint

        self.ckpt, self.layout, self.spec, self.probe, self.heads, self.n = Checkpoint(source), layout, spec, probe, heads, n
        self.context = context
        self.probe_map, self.causal = probe_map, causal
        config = source.config
        if layout.scale_key and config.get(layout.scale_key):
            self.scale, self.scale_rule = float(config[layout.scale_key]) ** -0.5, f"{layout.scale_key}^-1/2"
        else:
            self.scale, self.scale_rule = spec.head_dim**-0.5, "1/sqrt(d_h)"
        self.embed_scale = math.sqrt(float(config.get("hidden_size", 1))) if layout.embed_scale else 1.0
        self._mean_input: tuple[np.ndarray, str] | None = None

    def _plain_probe(self) -> tuple[np.ndarray, str]:
        """The probe's mean of normalised embeddings before the layer's own gain and bias (shared by all layers)."""
        if self._mean_input is None:
            kind, eps = self.layout.norm, self.layout.eps(self.ckpt.config)
            plain = None if kind is None else Norm("layer" if kind.startswith("layer") else "rms", None, None, eps)
            if self.probe_map is None:
                self._mean_input = probe_input(self.ckpt, self.layout.embed, self.probe, plain, self.embed_scale)
            else:
                to_input, what = self.probe_map(self.ckpt)
                norm = to_input if plain is None else (lambda x: plain(to_input(x)))
                self._mean_input = probe_input(self.ckpt, self.layout.embed, self.probe, norm, self.embed_scale, what)
        return self._mean_input

    def __call__(self, layer: int):
        weights = read_layer(self.ckpt, self.layout, self.ckpt.config, layer, self.heads, self.spec.head_dim)
        spec, pairing = rope.rope_spec(self.ckpt.config, layer), self.layout.pairing
        energy = rope_bands.band_energy_from_rows(*weights.effective_row_norms(), spec.rotary_dim, pairing)
        bands = rope_bands.summarize_bands(energy)
        mu_hat, probe_text = self._plain_probe()
        norm = weights.input_norm
        mu = mu_hat if norm is None else mu_hat * (1 if norm.gain is None else norm.gain) + (0 if norm.bias is None else norm.bias)
        q, k = weights.project(mu[None], normed=True)
        f = rope_bands.probe_profile(q[0], k[0], spec.inv_freq, self.n, rotary_dim=spec.rotary_dim, pairing=pairing,
                                     scale=self.scale, attention_factor=spec.attention_factor)
        prof = rope_bands.summarize_profiles(f)
        with np.errstate(divide="ignore"):
            wavelength = 2 * np.pi / spec.inv_freq
        # per layer: Gemma 3's sliding-window layers have their own base, hence their own boundary
        context_conv, beyond = _context_conventions(spec, *self.context)
        beyond_share = [None] * len(energy) if beyond is None else rope_bands.beyond_context_share(energy, beyond).tolist()
        conv = {
            **_spec_conventions(spec, self.causal),
            **context_conv,
            "pairing": pairing,
            "kv_heads": int(weights.wk.shape[0]),
            "probe": self.probe.label,
            "probe_input": probe_text,
            "band_frequency": [float(x) for x in spec.inv_freq],
            "band_wavelength": [float(x) for x in wavelength],
            "band_energy_rule": "||W_Q,h,b||_F * ||W_K,g(h),b||_F, norm gains folded in (docs/definitions.md)",
            "tensors_read": weights.tensors,
            "scale": self.scale,
            "scale_rule": self.scale_rule,
            "per_head": {
                "band_energy": energy.tolist(),
                "dominant_band": bands.dominant.tolist(),
                "dominant_wavelength": [float(wavelength[b]) for b in bands.dominant],
                "high_share": bands.high_share.tolist(),
                "low_share": (1 - bands.high_share).tolist(),
                "beyond_context_share": beyond_share,
                "peak_offset": prof.peak_offset.tolist(),
                "locality": prof.locality.tolist(),
                "weight_prev": prof.weight_prev.tolist(),
                "logit_prev": prof.logit_prev.tolist(),
            },
        }
        return ("rope", layer), (lambda: PositionalScores.from_offsets(f)), conv


def context_text(c: Mapping[str, Any]) -> str:
    """The context ``T``, the bands beyond it, the boundary band and ``d_extra`` of one layer's conventions, in words."""
    if c.get("context") is None:
        return f"trained context T {c.get('context_source') or 'unknown'}"
    bands = len(c.get("band_wavelength") or []) or int(c["rotary_dim"]) // 2
    n, first = c["bands_beyond_context"], c["context_boundary_band"]
    where = f"{n} of {bands} bands beyond it (wavelength 2π/θ_b > T), the first of them (boundary) band {first}" \
        if first is not None else f"none of the {bands} bands beyond it (every wavelength 2π/θ_b ≤ T)"
    return (f"T = {c['context']} ({c['context_source']}): {where}; Liu et al.'s critical dimension "
            f"d_extra = 2⌈(d/2)·log_base(T/2π)⌉ = {c['critical_dimension']} for d = {c['rotary_dim']}, base {c['rope_theta']:g}")


def describe(c: Mapping[str, Any]) -> list[str]:
    """Parts of the conventions line: rope type, base, rotated dimensions, pairing and probe."""
    if not c.get("rope_type"):
        return []
    parts = [f"rope {c['rope_type']}, theta {c['rope_theta']:g}, {c['rotary_dim']} of {c['head_dim']} dims rotated"]
    if c.get("pairing"):
        parts.append(f"{c['pairing']} pairing, {c['kv_heads']} key/value heads")
    if c.get("probe") and c["probe"] != "content-free":
        parts.append(f"probe {c['probe']}: {c['probe_input']}")
    elif c.get("probe"):
        parts.append("probe content-free (sum_b cos(k theta_b), no weights read)")
    return parts
