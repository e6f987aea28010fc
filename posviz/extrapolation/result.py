"""What ``posviz extrapolate`` measured: one record per model, variant and length, with its heads.

A :class:`LengthRecord` is one (model, RoPE-scaling variant, length): the held-out
loss or why there is none, and per (layer, head) the attention statistics. An
:class:`ExtrapolationResult` holds them all with the settings that made them and
writes them as JSON-ready records (:meth:`~ExtrapolationResult.records`, nested) or a
long pandas table (:meth:`~ExtrapolationResult.to_frame`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from posviz.extrapolation.evaluate import HeadStatistics

#: Equal position buckets of the loss by position within the window.
POSITION_BUCKETS = 32
#: Per-head fields of a record, in order (after ``layer`` and ``head``).
HEAD_FIELDS = ("entropy", "entropy_normalised", "max_weight", "sink_mass", "positional_share", "toeplitzness_offdiag")


@dataclass(frozen=True)
class LengthRecord:
    """One model (or RoPE-scaling variant of it) at one length.

    Attributes
    ----------
    model
        The model, as named in outputs.
    variant
        ``unscaled``, the scaling as given (``yarn:4``), or ``interpolated:N`` (``--extend-table``:
        the learned table interpolated to N positions).
    rope_scaling
        The variant's parameters: the scaling set on the config, or the table's
        interpolation (``None`` for ``unscaled``).
    length
        Positions per window, special tokens included.
    training_length, table_length
        The length the model was trained at, and the positions of its learned table (``None``: none).
    objective
        ``causal``, ``masked`` or ``None`` (no language-model loss).
    protocol, layout
        How the loss was computed; which special tokens sit where.
    loss
        Mean NLL per scored token (nats), or ``None`` (``reason`` says why).
    reason
        Why ``loss`` is ``None`` (a length the model cannot take, no trained head), else ``None``.
    tokens, windows, text_tokens
        Tokens scored, windows run, text tokens of the budget covered.
    causal
        Whether the attention was causal (``None`` when the length did not run).
    heads
        Per layer, :class:`~posviz.extrapolation.evaluate.HeadStatistics` (empty when the length did not run).
    position_nll, position_tokens
        ``(length,)``: per position of the window, the summed NLL of the tokens scored there and their number
        (``None`` without a loss); :meth:`loss_by_position` buckets them.
    """

    model: str
    variant: str
    rope_scaling: dict[str, Any] | None
    length: int
    training_length: int | None
    table_length: int | None
    objective: str | None
    protocol: str
    layout: str
    loss: float | None
    reason: str | None
    tokens: int = 0
    windows: int = 0
    text_tokens: int = 0
    causal: bool | None = None
    heads: dict[int, HeadStatistics] = field(default_factory=dict, repr=False)
    position_nll: Any = field(default=None, repr=False)
    position_tokens: Any = field(default=None, repr=False)

    def loss_by_position(self, buckets: int = POSITION_BUCKETS) -> tuple[list[int], list[float | None]] | None:
        """The loss by position within the window, in ``buckets`` equal position buckets: (first positions, mean NLL).

        Does the loss keep falling with more context, and where does it turn? A bucket with no scored token is ``None``.
        """
        if self.position_nll is None:
            return None
        import numpy as np

        n = len(self.position_nll)
        starts = sorted({(i * n) // min(buckets, n) for i in range(min(buckets, n))})
        nll, count = np.add.reduceat(self.position_nll, starts), np.add.reduceat(self.position_tokens, starts)
        return starts, [float(a / c) if c else None for a, c in zip(nll, count, strict=True)]

    @property
    def perplexity(self) -> float | None:
        """``exp(loss)``."""
        return None if self.loss is None else math.exp(self.loss)

    def head_rows(self) -> list[dict[str, Any]]:
        """One dict per (layer, head)."""
        return head_rows(self.heads)

    def means(self) -> dict[str, float | None]:
        """Each per-head field averaged over every measured head (``None`` when the length did not run)."""
        return head_means(self.head_rows())


def head_rows(heads: dict[int, Any]) -> list[dict[str, Any]]:
    """One dict per (layer, head) of per-layer statistics (objects or dicts holding each of :data:`HEAD_FIELDS`)."""
    out = []
    for layer, s in heads.items():
        values = {k: s[k] if isinstance(s, dict) else getattr(s, k) for k in HEAD_FIELDS}
        for h in range(len(values[HEAD_FIELDS[0]])):
            out.append({"layer": layer, "head": h, **{k: _finite(v[h]) for k, v in values.items()}})
    return out


def head_means(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    """Each of :data:`HEAD_FIELDS` averaged over ``rows`` (:func:`head_rows`), ``None`` where none has it."""
    out: dict[str, float | None] = {}
    for k in HEAD_FIELDS:
        values = [r[k] for r in rows if r[k] is not None]
        out[k] = sum(values) / len(values) if values else None
    return out


def _finite(x: Any) -> float | None:
    """A float, or ``None`` for NaN (JSON has no NaN)."""
    value = float(x)
    return value if math.isfinite(value) else None


@dataclass(frozen=True)
class ExtrapolationResult:
    """Loss and attention statistics of some models (and RoPE-scaling variants) at several lengths, on one text.

    Attributes
    ----------
    runs
        One :class:`LengthRecord` per model, variant and length, in that order.
    lengths
        The lengths, ascending.
    corpus
        The corpus spec(s) as given.
    corpus_identity
        ``corpus_sha256``, ``corpus_documents``, ``corpus_bytes`` of the text read.
    budget
        Per model, the text tokens every length is cut from (the first ``N`` of the corpus).
    stride, mask_rate, seed
        Sliding-window stride (``None``: non-overlapping blocks); masked LMs: share masked and seed.
    exact_maps
        Whether the attention statistics were summed from eager maps everywhere (else from tiles where the model allows).
    """

    runs: list[LengthRecord]
    lengths: list[int]
    corpus: str
    corpus_identity: dict[str, Any]
    budget: dict[str, int]
    stride: int | None = None
    mask_rate: float = 0.15
    seed: int = 0
    exact_maps: bool = False

    @property
    def corpus_label(self) -> str:
        """The corpus, as named in outputs: its spec and the first 12 hex digits of its SHA-256."""
        return f"{self.corpus} (sha256 {self.corpus_identity['corpus_sha256'][:12]})"

    @property
    def conventions(self) -> str:
        """One line stating how the numbers were made."""
        budget = "; ".join(f"{m}: the first {n} text tokens" for m, n in self.budget.items())
        windows = "non-overlapping blocks" if self.stride is None else f"sliding windows of stride {self.stride}"
        return (f"Text: {self.corpus_label}, the same at every length ({budget}; a shorter length leaves out less than one "
                f"window at the end); {windows}; attention: means over blocks and queries 1..n-1, entropy normalised by "
                "log(keys seen); " + ("from eager attention maps" if self.exact_maps else
                "from tiles of each layer's queries and keys where the model allows (it keeps its own attention; "
                "Toeplitzness on the 512 x 512 block-averaged mean map beyond 512 positions), else from eager maps"))

    def records(self) -> list[dict[str, Any]]:
        """One JSON-ready dict per model, variant and length, its heads as a list of dicts."""
        out = []
        for r in self.runs:
            out.append({
                "model": r.model, "variant": r.variant, "rope_scaling": r.rope_scaling, "length": r.length,
                "training_length": r.training_length, "table_length": r.table_length, "loss": r.loss,
                "perplexity": r.perplexity, "reason": r.reason, "objective": r.objective, "protocol": r.protocol,
                "tokens": r.tokens, "blocks": r.windows, "text_tokens": r.text_tokens, "stride": self.stride,
                "causal": r.causal, "layout": r.layout, "corpus": self.corpus, **self.corpus_identity, "seed": self.seed,
                "heads": r.head_rows(), **_by_position(r),
            })
        return out

    def flat_records(self) -> list[dict[str, Any]]:
        """Long format: one dict per model, variant, length, layer and head (a length that did not run: one row, no head)."""
        rows = []
        for rec in self.records():
            heads = rec.pop("heads")
            rec.pop("rope_scaling")
            rec.pop("loss_positions", None), rec.pop("loss_by_position", None)  # lists: in records(), not the long table
            for h in heads or [{"layer": None, "head": None, **dict.fromkeys(HEAD_FIELDS)}]:
                rows.append({**rec, **h})
        return rows

    def to_frame(self) -> Any:
        """The records as a pandas DataFrame in long format: one row per model × variant × length × layer × head.

        The length-level fields (``loss``, ``perplexity``, ``tokens``, ...) repeat on
        every row of their length; a length that did not run has one row with
        ``layer`` and ``head`` missing and its ``reason``.
        """
        import pandas as pd

        return pd.DataFrame(self.flat_records())


def _by_position(r: LengthRecord) -> dict[str, Any]:
    """The record's loss by position within the window (bucketed), JSON-ready; empty without a loss."""
    found = r.loss_by_position()
    return {} if found is None else {"loss_positions": found[0], "loss_by_position": found[1]}
