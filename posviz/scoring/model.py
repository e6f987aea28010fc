"""Model-level analysis shared by the CLI, the report and the Python API."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from posviz.read.embeddings import PositionEmbeddings, load_position_embeddings
from posviz.toeplitz.engine import score_embeddings
from posviz.toeplitz.result import ToeplitzScore


@dataclass
class ModelScore:
    """Toeplitzness of one model's ``P = E E^T`` with provenance."""

    embeddings: PositionEmbeddings
    score: ToeplitzScore

    def to_dict(self) -> dict[str, Any]:
        """Flat JSON-ready dict: provenance first, then the scores."""
        out = self.embeddings.metadata()
        out.update(self.score.to_dict())
        return out


def score_model(
    model: str | PositionEmbeddings,
    *,
    normalize: str = "none",
    null_draws: int = 10,
    seed: int = 0,
    positions: slice | str | None = None,
    table: str | None = None,
) -> ModelScore:
    """Load a model's position embeddings and score their Toeplitzness.

    Parameters
    ----------
    model
        Anything :func:`~posviz.read.embeddings.load_position_embeddings` accepts, or
        already loaded embeddings.
    normalize, null_draws, seed
        See :func:`~posviz.toeplitz.engine.score_embeddings`.
    positions, table
        See :func:`~posviz.read.embeddings.load_position_embeddings`.

    Examples
    --------
    >>> score_model("sinusoidal:128x64", null_draws=2).score.toeplitzness > 0.999
    True
    """
    pe = model if isinstance(model, PositionEmbeddings) else load_position_embeddings(model, table=table, positions=positions)
    return ModelScore(pe, score_embeddings(pe.matrix, normalize=normalize, null_draws=null_draws, seed=seed))
