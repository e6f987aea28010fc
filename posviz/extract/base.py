"""What every scheme's opener shares: the :class:`HeadsSource` protocol, its options, small checks.

A scheme module (``absolute``, ``t5``, ``alibi``, ``rope``, ``deberta``,
``posviz_trained``) is a :class:`SchemeModule`: ``claims(family, config)``,
``open_heads(source, family, options)`` returning a :class:`HeadsSource`, and
``describe(conventions)`` for its part of the one-line statement of
conventions; :mod:`posviz.extract.registry` lists them. See ARCHITECTURE.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from posviz.errors import OptionError, UnsupportedModelError
from posviz.read.families import HEAD_KEYS, LAYER_KEYS, config_value
from posviz.schemes.absolute import LN_MODES

if TYPE_CHECKING:
    from posviz.positional_scores import PositionalScores
    from posviz.read.families import Family
    from posviz.read.sources import Source
    from posviz.toeplitz.result import ToeplitzScore

#: Positions shown for schemes without a position table, unless ``--positions`` says otherwise.
DEFAULT_RELATIVE_POSITIONS = 512



@runtime_checkable
class HeadsSource(Protocol):
    """Per-head positional matrices of one model, layer by layer.

    Attributes
    ----------
    scheme
        The positional scheme in words.
    num_layers, num_heads
        Layers and heads (matrices per layer).
    n
        Number of positions (rows and columns of each matrix).
    """

    scheme: str
    num_layers: int
    num_heads: int

    @property
    def n(self) -> int: ...

    def check_layer(self, layer: int) -> int:
        """Return ``layer`` if it exists, else raise :class:`~posviz.errors.OptionError`."""
        ...

    def metadata(self) -> dict[str, Any]:
        """Model-level provenance: model, source, family, scheme, rows kept, counts."""
        ...

    def conventions(self, layer: int) -> dict[str, Any]:
        """The conventions used for ``layer`` (every output states them)."""
        ...

    def layer(self, layer: int) -> PositionalScores:
        """All heads of one layer, ``(heads, n, n)``, with metadata and conventions in ``meta``."""
        ...

    def score(
        self, layer: int, *, null_draws: int = 0, seed: int = 0, keep: bool = True
    ) -> tuple[PositionalScores | None, ToeplitzScore]:
        """The layer's stack (``None`` unless ``keep``) and its per-head scores."""
        ...


class SchemeModule(Protocol):
    """What a scheme module offers the registry (modules satisfy it by their functions)."""

    def claims(self, family: Family, config: Mapping[str, Any]) -> bool:
        """Whether this scheme analyses models of ``family`` (claims are exclusive)."""
        ...

    def open_heads(self, source: Source, family: Family, options: HeadsOptions) -> HeadsSource:
        """The :class:`HeadsSource` of a resolved source."""
        ...

    def describe(self, conventions: Mapping[str, Any]) -> list[str]:
        """This scheme's parts of a conventions line (empty for other schemes' conventions)."""
        ...


@dataclass(frozen=True)
class HeadsOptions:
    """What the user chose (``posviz heads`` options), passed to every opener.

    Attributes
    ----------
    ln
        ``none``, ``ln`` or ``ln+type0`` (:data:`posviz.schemes.absolute.LN_MODES`).
    bias
        Include the query/key projection biases.
    positions
        ``A:B`` or a slice of positions to keep, ``None`` for the scheme's default.
    table
        Position table or side (BART/T5: ``encoder`` or ``decoder``).
    probe
        RoPE models: the content probe of the per-head profiles (``mean``, ``token:ID|TEXT``,
        ``corpus:FILE``, ``none``/``content-free``; see :mod:`posviz.extract.rope_probe`).
    context
        RoPE models: the trained context length ``T`` that decides which bands go beyond it
        (``None``: from the config, :func:`posviz.schemes.rope.trained_context`).
    """

    ln: str = "ln"
    bias: bool = True
    positions: slice | str | None = None
    table: str | None = None
    probe: str | None = None
    context: int | None = None


def check_ln(ln: str) -> str:
    """Validate an ``--ln`` mode."""
    if ln not in LN_MODES:
        raise OptionError(f"--ln {ln!r} is not one of {', '.join(LN_MODES)}")
    return ln


def refuse_synthetic(model: object) -> None:
    """Synthetic controls (``sinusoidal:...``, ``gaussian:...``) have no attention heads."""
    from posviz.read.embeddings import is_synthetic

    if isinstance(model, str) and is_synthetic(model):
        raise UnsupportedModelError(f"{model} is a synthetic control without attention heads", "give a model checkpoint")


def check_layer(layer: int, num_layers: int, model: str) -> int:
    """Validate a layer index (clear error, exit code 2 in the CLI)."""
    if not 0 <= layer < num_layers:
        raise OptionError(f"--layer {layer} is out of range: {model} has {num_layers} layers (0-{num_layers - 1})")
    return layer


def no_table(options: HeadsOptions, config: Mapping[str, Any]) -> None:
    """Refuse ``--table`` for a model with a single attention stack."""
    if options.table is not None:
        raise OptionError(f"--table does not apply to {config.get('model_type')} models")


def layer_head_counts(config: Mapping[str, Any]) -> tuple[int, int]:
    """Number of layers and of heads from a config, whatever the family calls them."""
    layers, heads = config_value(config, LAYER_KEYS), config_value(config, HEAD_KEYS)
    if layers is None or heads is None:
        raise UnsupportedModelError("config.json lacks the number of layers or heads")
    return int(layers), int(heads)


def relative_positions(positions: slice | str | None, scheme: str) -> tuple[int, int]:
    """``(start, stop)`` of ``--positions`` for a scheme without a table (default ``0:512``)."""
    from posviz.read.embeddings import parse_positions

    sl = parse_positions(positions) if isinstance(positions, str) or positions is None else positions
    start = 0 if sl is None or sl.start is None else int(sl.start)
    stop = start + DEFAULT_RELATIVE_POSITIONS if sl is None or sl.stop is None else int(sl.stop)
    if start < 0 or stop - start < 2:
        raise OptionError(f"--positions {start}:{stop} is empty, negative or shorter than 2", f"{scheme} needs A:B with 0 <= A < B - 1")
    return start, stop


def read_finite(ckpt, name: str, rows: slice | None = None) -> np.ndarray:
    """Read a tensor as float64 and refuse NaN/Inf with a clear error naming the rows."""
    from posviz.read.embeddings import check_finite

    arr = ckpt.read(name, rows)
    check_finite(arr, f"{ckpt.source.label}: {name}")
    return arr
