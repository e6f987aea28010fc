"""What ``posviz hidden`` returns: :class:`HiddenResult`, its records and its conventions line."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from posviz.observe.hidden_statistics import HiddenLayer
from posviz.observe.probe import ProbeResult

#: Fields of a record, in order (after ``model`` and ``layer``).
FIELDS = ("positional_share", "positional_share_null", "context_share", "toeplitzness_offdiag", "toeplitzness",
          "toeplitzness_null_offdiag", "toeplitzness_null", "toeplitzness_null_std_offdiag", "excess_offdiag", "excess",
          "rank90", "stable_rank", "positional_norm", "state_norm")


@dataclass(frozen=True)
class HiddenResult:
    """Position in the hidden states of the chosen layers of one model over one corpus.

    Attributes
    ----------
    model
        The model, as named in outputs.
    layers
        Hidden-state indices scored (0 = the embedding output, ``l`` = the output of block ``l``).
    seq_len, blocks
        Positions per block, blocks run.
    kept
        The positions every statistic uses (special-token positions left out).
    layout
        Which special tokens sit at which positions of every block.
    corpus
        The corpus, as named in outputs.
    stats
        Per layer, :class:`~posviz.observe.hidden_statistics.HiddenLayer`.
    probes
        Per layer, :class:`~posviz.observe.probe.ProbeResult`.
    vectors
        Per layer, the positional vectors ``V`` ``(len(kept), d)``.
    seed
        Seed of the null draws, the probe sample and the probes.
    """

    model: str
    layers: list[int]
    seq_len: int
    blocks: int
    kept: np.ndarray
    layout: str
    corpus: str
    stats: dict[int, HiddenLayer]
    probes: dict[int, ProbeResult]
    vectors: dict[int, np.ndarray] = field(repr=False)
    seed: int = 0

    @property
    def excluded(self) -> list[int]:
        """Positions left out (they hold the same special token in every block)."""
        return sorted(set(range(self.seq_len)) - {int(i) for i in self.kept})

    @property
    def conventions(self) -> str:
        """One line stating how the numbers were made."""
        left = (f"positions {', '.join(map(str, self.excluded))} left out (a special token in every block)"
                if self.excluded else "no position left out")
        p = self.probes[self.layers[0]]
        return (f"{self.blocks} blocks of {self.seq_len} tokens from {self.corpus}; {self.layout}; {left}; layer 0 = embedding "
                "output; share null: positions shuffled within blocks (exact mean); Toeplitzness null: rows of V permuted "
                f"(exact mean); probes: {p.train_blocks} training and {p.test_blocks} held-out blocks (seed {self.seed})")

    def records(self) -> list[dict[str, Any]]:
        """One plain dict per layer, JSON-ready."""
        out = []
        for layer in self.layers:
            s, p = self.stats[layer], self.probes[layer]
            r: dict[str, Any] = {"model": self.model, "layer": layer}
            for name in FIELDS:
                value = getattr(s, name)
                r[name] = int(value) if name == "rank90" else float(value)
            r.update(probe_mae=p.mae, probe_mae_baseline=p.mae_baseline, probe_order_accuracy=p.order_accuracy,
                     probe_order_chance=0.5, probe_train_blocks=p.train_blocks, probe_test_blocks=p.test_blocks,
                     blocks=self.blocks, seq_len=self.seq_len, positions=len(self.kept),
                     excluded_positions=",".join(map(str, self.excluded)))
            out.append(r)
        return out

    def to_frame(self) -> Any:
        """The records as a pandas DataFrame, one row per layer."""
        import pandas as pd

        return pd.DataFrame(self.records())
