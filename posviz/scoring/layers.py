"""The layer loop: score the requested layers of an opened heads source, one at a time.

``posviz heads`` and the report's per-head pages both go through here:
:func:`parse_layers` turns ``--layer``/``--layers`` into layer numbers,
:func:`scan_layers` scores each layer (keeping its ``(heads, n, n)`` stack only
when asked, so that many layers cost the memory of one) and states its
conventions, and :class:`LayerTable` holds the results as output rows (one per
head) or as layer x head matrices. See ARCHITECTURE.md for where the heads
source comes from (:func:`posviz.extract.absolute.open_heads`).
"""

from __future__ import annotations

import re
from collections.abc import Container, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from posviz.toeplitz.headline import HEADLINE_EXCLUDE_DIAGONAL

if TYPE_CHECKING:
    import numpy as np

    from posviz.positional_scores import PositionalScores
    from posviz.toeplitz.result import ToeplitzScore


def parse_layers(layer: int | None, layers: str | None, num_layers: int, label: str = "the model") -> list[int]:
    """Layers requested by ``--layer L`` or ``--layers all|A,B,C-D`` (default: layer 0).

    Parameters
    ----------
    layer, layers
        The two options (at most one given).
    num_layers
        Layers of the model.
    label
        The model, as named in errors.

    Returns
    -------
    list of int
        Distinct layer numbers, in the order requested.

    Raises
    ------
    OptionError
        Both options given, a malformed list, or a layer out of range.
    """
    from posviz.errors import OptionError

    if layer is not None and layers is not None:
        raise OptionError("give either --layer or --layers, not both")
    if layers is None:
        chosen = [0 if layer is None else layer]
    elif layers.strip().lower() == "all":
        chosen = list(range(num_layers))
    else:
        chosen = []
        for part in layers.split(","):
            m = re.fullmatch(r"\s*(-?\d+)\s*(?:-\s*(-?\d+)\s*)?", part)
            if not m:
                raise OptionError(f"--layers {layers!r} is not 'all' or a list like 0,2,5-7")
            a, b = int(m.group(1)), int(m.group(2) if m.group(2) is not None else m.group(1))
            if b < a:
                raise OptionError(f"--layers range {a}-{b} is empty")
            chosen += list(range(a, b + 1))
    for x in chosen:
        if not 0 <= x < num_layers:
            named = f"--layer {x}" if layers is None else f"--layers {layers}: layer {x}"  # the option the user gave
            raise OptionError(f"{named} is out of range: {label} has {num_layers} layers (0-{num_layers - 1})")
    return list(dict.fromkeys(chosen))


def first_position(heads) -> int:
    """Position of row and column 0 of the source's stacks (for axis labels)."""
    pe = getattr(heads, "pe", None)
    if pe is not None:
        return int(pe.positions[0])
    return int(getattr(heads, "first_position", 0))


@dataclass(frozen=True)
class LayerScores:
    """One layer's per-head scores with the conventions they were computed under.

    Attributes
    ----------
    layer
        Layer index.
    scores
        Per-head Toeplitzness, null baseline and offset profiles.
    conventions
        The layer's conventions (LayerNorm, biases, scale, scheme, ...), as the source states them.
    convention_line
        The same in one line, with the rows kept.
    stack
        The layer's ``(heads, n, n)`` stack, when it was kept (see :func:`scan_layers`).
    """

    layer: int
    scores: ToeplitzScore
    conventions: dict[str, Any]
    convention_line: str
    stack: PositionalScores | None = None

    @property
    def causal(self) -> bool:
        """True when the model masks keys after the query (``k = j - i > 0``)."""
        return bool(self.conventions.get("causal"))


def scan_layers(
    heads,
    layers: Iterable[int],
    *,
    null_draws: int = 0,
    seed: int = 0,
    keep: Container[int] = (),
    progress_label: str | None = None,
) -> Iterator[LayerScores]:
    """Score each requested layer of an opened heads source, one layer at a time.

    Parameters
    ----------
    heads
        What :func:`posviz.extract.absolute.open_heads` returns.
    layers
        Layer indices (e.g. from :func:`parse_layers`).
    null_draws, seed
        Sampled row permutations for the null's spread (the null mean is exact).
    keep
        Layers whose stack is returned too (for figures); the others are scored
        without keeping it, reusing one work array.
    progress_label
        Text of a progress bar on stderr for several layers (``None``: no bar).

    Yields
    ------
    LayerScores
        In the order of ``layers``.
    """
    from posviz.extract.registry import convention_line

    rows_note = heads.metadata().get("rows_note")
    layers = list(layers)
    if progress_label:
        from posviz.util.progress import progress

        layers = progress(layers, progress_label)
    for layer in layers:
        stack, scores = heads.score(layer, null_draws=null_draws, seed=seed, keep=layer in keep)
        conventions = heads.conventions(layer)
        line = convention_line({**conventions, "rows_note": rows_note})
        yield LayerScores(layer, scores, conventions, line, stack)


# Leading fields of an output row, in this order; the rest follow as the source gives them.
_FIRST = ("model", "layer", "head", "toeplitzness", "toeplitzness_offdiag", "null_mean", "null_mean_offdiag",
          "null_std", "null_std_offdiag", "excess", "excess_offdiag", "peak_offset", "f_hat_0")


@dataclass
class LayerTable:
    """The scores of several layers of one model, as output rows or layer x head matrices.

    Attributes
    ----------
    metadata
        The source's provenance (model, scheme, positions, rows kept, ...).
    layers
        One :class:`LayerScores` per layer scanned, in order (stacks are dropped).
    """

    metadata: dict[str, Any]
    layers: list[LayerScores] = field(default_factory=list)

    def add(self, scored: LayerScores) -> None:
        """Append a layer's scores, without its stack."""
        self.layers.append(replace(scored, stack=None))

    @property
    def indices(self) -> list[int]:
        """The layer numbers, in order."""
        return [x.layer for x in self.layers]

    @property
    def convention_line(self) -> str:
        """One conventions line for all the layers (module names' layer numbers become L where they differ)."""
        from posviz.extract.registry import summary_convention_line

        return summary_convention_line([x.convention_line for x in self.layers], self.indices)

    def rows(self, *, exclude_diagonal: bool = HEADLINE_EXCLUDE_DIAGONAL, profiles: bool = False) -> list[dict[str, Any]]:
        """One JSON-ready row per head and layer: provenance, conventions and scores.

        ``variant`` states which Toeplitzness is headlined (``full`` or ``exclude_diagonal``);
        ``profiles`` adds each head's offset profile. Fields a source gives per head
        (``conventions["per_head"]``, e.g. RoPE band energy) override the scores' own.
        """
        variant = "exclude_diagonal" if exclude_diagonal else "full"
        out = []
        for x in self.layers:
            # ``per_head``: fields with one value per head (RoPE band usage), spread over the rows
            conventions = {k: v for k, v in x.conventions.items() if k != "per_head"}
            per_head = x.conventions.get("per_head", {})
            for head in x.scores.rows(profiles=profiles):
                own = {k: v[head["head"]] for k, v in per_head.items()}
                row = {**self.metadata, **conventions, **head, **own, "layer": x.layer, "variant": variant}
                first = {k: row[k] for k in _FIRST if k in row}
                out.append({**first, **{k: v for k, v in row.items() if k not in first}})
        return out

    def matrix(self, name: str) -> np.ndarray:
        """A ``(layers, heads)`` array of one per-head score (``toeplitzness``, ``null_mean_offdiag``, ...)."""
        import numpy as np

        return np.array([getattr(x.scores, name) for x in self.layers], dtype=float)
