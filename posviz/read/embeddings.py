"""Position embeddings E_P from checkpoints, and synthetic controls.

:func:`load_position_embeddings` is the one entry point: it resolves a model
(path, hub id, packaged copy), finds its family's position table, reads only
that tensor (only the kept rows), checks it is finite and returns it as float64
with the metadata every output reports (source, rows kept, conventions).

Synthetic controls are addressed like models: ``sinusoidal:512x768`` (fixed
Vaswani et al. embeddings, exactly Toeplitz) and ``gaussian:512x384:0`` (i.i.d.
normal rows with a seed, the null case).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from posviz.errors import CheckpointError, OptionError, UnsupportedModelError
from posviz.read.families import (
    Family,
    family_for_config,
    family_from_tensor_names,
    no_learned_positions,
)

if TYPE_CHECKING:
    from posviz.read.sources import Source


@dataclass
class PositionEmbeddings:
    """Learned (or synthetic) absolute position embeddings with their provenance.

    Attributes
    ----------
    matrix
        ``(n, d)`` float64, row ``i`` is position ``positions[0] + i``.
    model
        Model label (hub id, path or synthetic spec).
    source
        Where the weights came from (``hub org/name@commit``, ``path ...``).
    family
        Family name (``bert``, ``roberta``, ``gpt2``, ...).
    table
        Which table (``positions``, ``encoder``, ``decoder``).
    tensor
        Tensor name in the checkpoint.
    stored_rows
        Rows of the stored table.
    row_offset
        Stored rows before position 0 (2 for RoBERTa/OPT/BART).
    positions
        Half-open range of positions kept, ``(start, stop)``.
    dtype
        Stored dtype.
    revision
        Commit hash or package version, when known.
    config
        The model's config (empty for synthetic controls).
    fixed
        The kind of a table computed from the config rather than read (``sinusoidal``), else ``None``.
    """

    matrix: np.ndarray
    model: str
    source: str
    family: str
    table: str
    tensor: str
    stored_rows: int
    row_offset: int
    positions: tuple[int, int]
    dtype: str
    revision: str | None = None
    config: dict[str, Any] = field(default_factory=dict, repr=False)
    fixed: str | None = None

    @property
    def n(self) -> int:
        """Number of positions kept."""
        return int(self.matrix.shape[0])

    @property
    def dim(self) -> int:
        """Embedding dimension."""
        return int(self.matrix.shape[1])

    @property
    def rows(self) -> tuple[int, int]:
        """Stored rows kept, half-open ``(first, stop)``."""
        return (self.row_offset + self.positions[0], self.row_offset + self.positions[1])

    def rows_note(self) -> str:
        """Human description of the rows kept, e.g. ``rows 2-513 of 514``."""
        first, stop = self.rows
        text = f"rows {first}-{stop - 1} of {self.stored_rows}"
        if self.row_offset:
            text += f" (rows 0-{self.row_offset - 1} precede position 0)"
        return text

    def metadata(self) -> dict[str, Any]:
        """Provenance as a plain dict (for JSON output and reports)."""
        return {
            "model": self.model,
            "source": self.source,
            "family": self.family,
            "table": self.table,
            "tensor": self.tensor,
            "positions": self.n,
            "dim": self.dim,
            "rows": [self.rows[0], self.rows[1]],
            "stored_rows": self.stored_rows,
            "dtype": self.dtype,
            "revision": self.revision,
        }


def sinusoidal_embeddings(n: int, d: int, base: float = 10000.0) -> np.ndarray:
    """Fixed sinusoidal embeddings of Vaswani et al. (2017), shape ``(n, d)``.

    ``PE[p, 2i] = sin(p / base**(2i/d))`` and ``PE[p, 2i+1] = cos(...)``. Their Gram
    matrix depends only on ``p - q`` (exactly Toeplitz), which makes them the
    positive control for Toeplitzness.
    """
    if n < 1 or d < 1:
        raise OptionError(f"sinusoidal embeddings need n >= 1 and d >= 1, got {n}x{d}")
    pos = np.arange(n, dtype=np.float64)[:, None]
    freq = base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    e = np.zeros((n, d))
    e[:, 0::2] = np.sin(pos * freq)
    e[:, 1::2] = np.cos(pos * freq)[:, : d // 2]
    return e


_SYNTHETIC = re.compile(r"^(sinusoidal|gaussian)(?::(\d+)x(\d+))?(?::(\d+))?$")


def is_synthetic(spec: str) -> bool:
    """True for ``sinusoidal[:NxD]`` and ``gaussian[:NxD][:SEED]`` specs."""
    return bool(_SYNTHETIC.match(spec))


def _synthetic(spec: str) -> PositionEmbeddings:
    m = _SYNTHETIC.match(spec)
    assert m is not None
    kind, n, d, seed = m.group(1), int(m.group(2) or 512), int(m.group(3) or 768), int(m.group(4) or 0)
    if kind == "sinusoidal":
        e = sinusoidal_embeddings(n, d)
        source = f"synthetic: sinusoidal, base 10000, {n}x{d}"
    else:
        e = np.random.default_rng(seed).normal(size=(n, d))
        source = f"synthetic: i.i.d. N(0, 1), seed {seed}, {n}x{d}"
    return PositionEmbeddings(e, spec, source, kind, "positions", "-", n, 0, (0, n), "float64")


def parse_positions(text: str | None) -> slice | None:
    """Parse ``A:B`` (either side optional) into a slice of positions."""
    if text is None or text == "":
        return None
    m = re.fullmatch(r"\s*(-?\d*)\s*:\s*(-?\d*)\s*", text)
    if not m:
        raise OptionError(f"--positions {text!r} is not of the form A:B", "for example 0:128 or 2:")
    a, b = (int(g) if g else None for g in m.groups())
    return slice(a, b)


def _kept(positions: slice | None, available: int) -> tuple[int, int]:
    if positions is None:
        start, stop = 0, available
    else:
        if positions.step not in (None, 1):
            raise OptionError("--positions does not take a step")
        start = 0 if positions.start is None else positions.start
        stop = available if positions.stop is None else positions.stop
        if start < 0 or stop > available or start >= stop:
            raise OptionError(
                f"--positions {start}:{stop} is out of range or empty",
                f"the model has positions 0:{available}",
            )
    if stop - start < 2:
        raise OptionError(f"need at least 2 positions, got {stop - start}")
    return start, stop


def check_finite(matrix: np.ndarray, what: str) -> None:
    """Raise a clear error naming the rows that hold NaN or Inf."""
    bad = ~np.isfinite(matrix)
    if bad.any():
        rows = np.flatnonzero(bad.any(axis=tuple(range(1, matrix.ndim))))
        shown = ", ".join(str(r) for r in rows[:8]) + (" ..." if len(rows) > 8 else "")
        raise CheckpointError(f"{what} contains NaN or Inf in {len(rows)} row(s): {shown}")


def load_position_embeddings(
    model: str | Source,
    *,
    table: str | None = None,
    positions: slice | str | None = None,
    checkpoint: Any = None,
) -> PositionEmbeddings:
    """Load the learned absolute position embeddings E_P of a model.

    Parameters
    ----------
    model
        Model folder, ``.safetensors``/``.bin`` file, hub id (``org/name[@rev]``),
        a synthetic control (``sinusoidal:512x768``, ``gaussian:512x384:0``), or
        an already resolved :class:`~posviz.read.sources.Source`.
    table
        For models with several tables (BART: ``encoder``/``decoder``); default first.
    positions
        Positions to keep, as a slice or ``"A:B"``; counted from position 0,
        after the family's row offset (RoBERTa/OPT/BART rows 0-1 are never
        positions).
    checkpoint
        The :class:`~posviz.read.checkpoints.Checkpoint` of ``model`` (a resolved
        source) when the caller has opened it already; else it is opened here.

    Returns
    -------
    PositionEmbeddings
        ``matrix`` is float64 whatever the stored dtype.

    Raises
    ------
    PosvizError
        Unknown model type, no learned positions (the message says which
        analysis applies), unreadable file, NaN/Inf values, bad ``positions``.

    Examples
    --------
    >>> pe = load_position_embeddings("sinusoidal:128x64")
    >>> pe.matrix.shape
    (128, 64)
    """
    from posviz.read.checkpoints import Checkpoint
    from posviz.read.sources import Source, resolve_source

    sl = parse_positions(positions) if isinstance(positions, str) or positions is None else positions
    if isinstance(model, str) and is_synthetic(model):
        pe = _synthetic(model)
        start, stop = _kept(sl, pe.n)
        pe.matrix = pe.matrix[start:stop]
        pe.positions = (start, stop)
        return pe
    source = model if isinstance(model, Source) else resolve_source(model)
    ckpt = checkpoint if checkpoint is not None else Checkpoint(source)
    fam = _family(ckpt)
    tab = fam.table(table)
    if tab.fixed:
        return _fixed_table(source, fam, tab.fixed, sl)
    name = ckpt.find(tab.suffix)
    if name is None:
        raise CheckpointError(
            f"{source.label}: no tensor ending in {tab.suffix!r} although model_type is "
            f"{source.config.get('model_type', '?')!r}",
            "the checkpoint may hold only part of the model",
        )
    shape = ckpt.shape(name)
    if len(shape) != 2:
        raise CheckpointError(f"{source.label}: {name} has shape {shape}, expected (positions, dim)")
    offset = fam.row_offset(source.config)
    available = shape[0] - offset
    if available < 2:
        raise CheckpointError(f"{source.label}: {name} has only {shape[0]} rows")
    start, stop = _kept(sl, available)
    matrix = ckpt.read(name, slice(offset + start, offset + stop))
    check_finite(matrix, f"{source.label}: {name} (row numbers relative to position {start})")
    return PositionEmbeddings(
        matrix=matrix,
        model=source.label,
        source=source.describe(),
        family=fam.name,
        table=tab.label,
        tensor=name,
        stored_rows=shape[0],
        row_offset=offset,
        positions=(start, stop),
        dtype=ckpt.dtype(name),
        revision=source.revision,
        config=source.config,
    )


def _fixed_table(source: Source, fam: Family, kind: str, sl: slice | None) -> PositionEmbeddings:
    """A table the model computes rather than stores (posviz ``sinusoidal``), from its config: as many rows as it trained on."""
    config = source.config
    n, d = int(config["max_position_embeddings"]), int(config["embedding_size"])
    start, stop = _kept(sl, n)
    # the scale the model multiplies its table by (posviz runs record it; 1 for a config without the field)
    matrix = sinusoidal_embeddings(n, d)[start:stop] * float(config.get("sinusoidal_scale", 1.0))
    return PositionEmbeddings(
        matrix=matrix, model=source.label, source=source.describe(), family=fam.name, table="positions",
        tensor=f"(fixed {kind} table, {n}x{d}, computed from config.json)", stored_rows=n, row_offset=0,
        positions=(start, stop), dtype="float64", revision=source.revision, config=config, fixed=kind,
    )


def _family(ckpt) -> Family:
    if ckpt.config:
        fam = family_for_config(ckpt.config)
    else:
        fam = family_from_tensor_names(ckpt.names())
        if fam is None:
            raise UnsupportedModelError(
                f"{ckpt.source.label}: no config.json beside the file and no known position tensor in it",
                "put the model's config.json next to the weight file",
            )
    if not fam.tables:
        raise no_learned_positions(fam)
    return fam
