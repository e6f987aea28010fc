"""Per-head positional matrices from a family's own ``positional_scores`` function.

Models built by ``posviz train`` (``model_type`` ``posviz-albert``: absolute,
TISA, TUPE, T5 and ALiBi positions) name, in their family's ``extra``, the
function that returns each layer's :class:`~posviz.positional_scores.PositionalScores`
exactly as the model adds them to its attention logits. ``posviz heads``
analyses those models through that function, i.e. with the code that trains
them (DESIGN.md: one forward signature for every scheme).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from posviz.errors import OptionError
from posviz.positional_scores import PositionalScores

if TYPE_CHECKING:
    from posviz.toeplitz.result import ToeplitzScore


def _function(spec: str):
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass
class HookHeads:
    """Layer-by-layer per-head matrices of a model whose family provides ``positional_scores``.

    Offers the interface of :class:`posviz.extract.absolute.AbsoluteHeads` (``num_layers``,
    ``num_heads``, ``n``, ``layer``, ``score``, ``metadata``, ``conventions``).
    Build it with :func:`open_hook_heads`.
    """

    model: str
    spec: str
    source: str
    config: dict[str, Any]
    family: str
    num_layers: int
    num_heads: int
    n: int
    ln: str
    function: Any = field(repr=False)
    _cache: dict[Any, Any] = field(default_factory=dict, repr=False)
    first_position: int = 0

    def check_layer(self, layer: int) -> int:
        """Validate a layer index."""
        if not 0 <= layer < self.num_layers:
            raise OptionError(f"--layer {layer} is out of range: {self.model} has {self.num_layers} layers (0-{self.num_layers - 1})")
        return layer

    def _stack(self, layer: int) -> tuple[Any, PositionalScores]:
        self.check_layer(layer)
        if ("layer", layer) not in self._cache:
            stack = self.function(self.spec, layer=layer, n=self.n, convention=self.ln)
            key = "shared" if stack.meta.get("shared_across_layers") else layer
            self._cache[("layer", layer)] = key
            self._cache.setdefault(("stack", key), stack)
        key = self._cache[("layer", layer)]
        return key, self._cache[("stack", key)]

    def metadata(self) -> dict[str, Any]:
        """Model-level provenance."""
        return {
            "model": self.model,
            "source": self.source,
            "family": self.family,
            "model_type": self.config.get("model_type"),
            "scheme": f"posviz model, position_scheme {self.config.get('position_scheme', 'absolute')!r}",
            "positions": self.n,
            "rows": [0, self.n],
            "rows_note": f"positions 0-{self.n - 1}",
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
        }

    def conventions(self, layer: int) -> dict[str, Any]:
        """The conventions of ``layer``'s matrices, from the model code's own metadata."""
        _, stack = self._stack(layer)
        m = stack.meta
        out: dict[str, Any] = {
            "position_scheme": m.get("scheme"),
            "computed_by": "posviz.models.position_terms.positional_scores (the model's own positional code)",
            "shared_across_layers": bool(m.get("shared_across_layers")),
            "scale_rule": m.get("scale", "1 (added to the scaled logits)"),
        }
        if "convention" in m:  # absolute table: position-only Q K^T of the layer's group
            out.update(ln=m["convention"], bias=True, layer_group=m.get("layer_group"))
        if m.get("cls_untied"):
            out["cls_untied"] = True
        return out

    def layer(self, layer: int) -> PositionalScores:
        """All heads of one layer."""
        _, stack = self._stack(layer)
        out = PositionalScores(stack.form, stack.n, stack.heads, stack.left, stack.right, stack.offsets, stack.dense)
        out.meta = {**stack.meta, **self.metadata(), **self.conventions(layer), "layer": layer}
        return out

    def score(self, layer: int, *, null_draws: int = 0, seed: int = 0, keep: bool = True) -> tuple[PositionalScores | None, ToeplitzScore]:
        """The layer's stack and per-head scores (computed once per distinct matrix)."""
        from posviz.toeplitz.engine import score_layer

        key, stack = self._stack(layer)
        skey = ("score", key, null_draws, seed)
        if skey not in self._cache:
            self._cache[skey] = score_layer(stack, null_draws=null_draws, seed=seed)
        return (self.layer(layer) if keep else None), self._cache[skey]


def open_hook_heads(source, family, *, ln: str, bias: bool, positions: slice | str | None, table: str | None) -> HookHeads:
    """:class:`HookHeads` for a resolved source whose family names a ``positional_scores`` function.

    Parameters
    ----------
    source
        A resolved :class:`~posviz.read.sources.Source`.
    family
        Its :class:`~posviz.read.families.Family` (``extra["positional_scores"]`` set).
    ln
        Convention for absolute tables (``none``, ``ln``, ``ln+type0``).
    bias
        Must be true: these models' position-only logits always include the biases.
    positions
        ``0:B`` (or ``:B``): positions ``0 .. B-1``; default all.
    table
        Not applicable.
    """
    from posviz.read.embeddings import parse_positions

    config = source.config
    if table is not None:
        raise OptionError("--table does not apply to models trained with posviz train")
    if not bias:
        raise OptionError("--no-bias is not available for models trained with posviz train", "their maps always include the biases")
    max_n = int(config.get("max_position_embeddings", 512))
    sl = parse_positions(positions) if isinstance(positions, str) or positions is None else positions
    start = 0 if sl is None or sl.start is None else int(sl.start)
    stop = max_n if sl is None or sl.stop is None else int(sl.stop)
    if start != 0 or not 2 <= stop <= max_n:
        raise OptionError(f"--positions {start}:{stop} is not available here", f"posviz models take 0:B with 2 <= B <= {max_n}")
    return HookHeads(
        model=source.label,
        spec=source.spec,
        source=source.describe(),
        config=config,
        family=family.name,
        num_layers=int(config["num_hidden_layers"]),
        num_heads=int(config["num_attention_heads"]),
        n=stop,
        ln=ln,
        function=_function(family.extra["positional_scores"]),
    )
