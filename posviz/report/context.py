"""What a report is about: its inputs, options and the facts every section shares.

A :class:`ReportContext` is built once (models loaded and scored once) and handed
to every section builder. Sections read from it and never load models again.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from posviz.read.embeddings import PositionEmbeddings
from posviz.toeplitz.result import ToeplitzScore


@dataclass(frozen=True)
class ReportOptions:
    """Settings of one report, stated on its title page.

    Attributes
    ----------
    title
        Report title; default ``posviz report: MODEL, ...``.
    normalize
        How ``E`` is normalised before forming ``P`` (``none``, ``cosine``, ``center``).
    null_draws, seed
        Null baseline: row permutations of ``E`` and their seed.
    positions
        Positions to keep (``"A:B"``), as in the other commands.
    table
        Position table for models with several (BART: encoder or decoder).
    max_pixels
        Heatmaps of larger matrices are block-averaged to this many cells per side,
        so that a page stays small however many positions a model has.
    cmap
        Colormap of the P heatmaps (``hot`` matches the TISA paper).
    robust
        Clip heatmap colours to the 1st-99th percentile.
    metric
        Benchmark on the y axis of the ALBERT v1 -> v2 figure (a key of
        :data:`posviz.reference.METRICS`).
    scores
        ``{input: value}``: benchmark values (in ``metric``'s units) of report
        inputs, which places them on the ALBERT figure (``--score MODEL=VALUE``).
    albert
        Include the ALBERT v1 -> v2 section (it needs the eight checkpoints, from
        the caches or the Hub).
    layers
        Layers whose head grids get a page (``"0"``, ``"0,5-7"``, ``"all"``); the
        layer x head Toeplitzness page always covers every layer.
    attention_corpus
        Corpus spec for the attention section (``posviz attention``); ``None`` leaves
        the section out, so that reports do not run models unless asked.
    attention_seq_len, attention_max_blocks
        Block length and number of blocks of the attention section.
    hidden_corpus
        Corpus spec for the hidden-states section (``posviz hidden``); ``None`` leaves
        the section out.
    hidden_seq_len, hidden_max_blocks
        Block length and number of blocks of the hidden-states section.
    measures, measures_corpus, measures_seq_len, measures_max_blocks
        Other measures of the registry that run on text (``--measure NAME``: those with a text-pass request), each
        with a page per model, and their corpus, block length and blocks (shared with the attention and
        hidden-states sections where they agree: one pass).
    extrapolate_lengths
        Lengths of the extrapolation section (``posviz extrapolate``), e.g. ``"64,128,256"``;
        ``None`` leaves the section out.
    extrapolate_corpus, extrapolate_max_blocks
        Its corpus, and the blocks of its longest length that make the text budget.
    """

    title: str | None = None
    normalize: str = "none"
    null_draws: int = 10
    seed: int = 0
    positions: str | None = None
    table: str | None = None
    max_pixels: int = 512
    cmap: str = "hot"
    robust: bool = True
    metric: str = "average"
    scores: Mapping[str, float] = field(default_factory=dict)
    albert: bool = True
    layers: str = "0"
    attention_corpus: str | None = None
    attention_seq_len: int = 128
    attention_max_blocks: int = 64
    hidden_corpus: str | None = None
    hidden_seq_len: int = 128
    hidden_max_blocks: int = 64
    measures: tuple[str, ...] = ()
    measures_corpus: str | None = None
    measures_seq_len: int = 128
    measures_max_blocks: int = 64
    extrapolate_lengths: str | None = None
    extrapolate_corpus: str = "cpython-3.11.7-docstrings"
    extrapolate_max_blocks: int = 4


@dataclass
class ReportItem:
    """One input of the report (a model), with what posviz knows about it.

    Attributes
    ----------
    spec
        The argument as given (path, hub id, control).
    label
        Short name used in titles and tables.
    source
        Where the weights came from (``hub org/name@commit``, ``package ...``, ``path ...``).
    kind
        What the input is, set by the loader that recognised it (:data:`posviz.report.inputs.INPUT_LOADERS`):
        ``model`` (learned absolute positions), ``model-without-positions``
        (relative, ALiBi or rotary schemes: no ``P = E Eᵀ``; ``note`` says which) or
        ``run`` (a ``posviz train`` run folder: ``data["run"]`` is its
        :class:`~posviz.report.runs.RunInfo`; ``embeddings`` and ``score`` come from
        its final checkpoint when the scheme has a position table).
    family
        Architecture family (``bert``, ``gpt2``, ...; ``t5`` etc. for models without positions).
    embeddings
        The position table E (``None`` when the model has none).
    score
        Toeplitzness of ``P = E Eᵀ`` with its null baseline (``None`` without ``embeddings``).
    note
        Why a section has nothing for this item, in one sentence.
    data
        Anything else a loader read for the sections that use it, by name.
    """

    spec: str
    label: str
    source: str
    kind: str = "model"
    family: str = ""
    embeddings: PositionEmbeddings | None = None
    score: ToeplitzScore | None = None
    note: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def has_positions(self) -> bool:
        """True when the item has a learned absolute position table (a P to show)."""
        return self.embeddings is not None


@dataclass
class ReportContext:
    """Everything the section builders read.

    Attributes
    ----------
    items
        The report's inputs, in command-line order.
    options
        Report settings.
    date
        Report date, ``YYYY-MM-DD`` (UTC); from ``SOURCE_DATE_EPOCH`` when set.
    version
        posviz version that wrote the report.
    included
        Keys of the sections that produced pages so far (filled while rendering, so
        the methods page can state the definitions of exactly those sections).
    notes
        One-sentence notes for the title page, added by sections while rendering:
        a section left out for a reason the reader should know (and how to get
        what it needs), or one that is incomplete.
    extras
        Room for data that one section computes and a later one reuses.
    sections
        The sections being drawn, in page order (set by the renderer, so that the
        methods page can describe the included ones).
    """

    items: list[ReportItem]
    options: ReportOptions = field(default_factory=ReportOptions)
    date: str = ""
    version: str = ""
    included: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    extras: dict[str, Any] = field(default_factory=dict)
    sections: list[Any] = field(default_factory=list)

    @property
    def title(self) -> str:
        """The report title (the option, or one naming the models)."""
        if self.options.title:
            return self.options.title
        from posviz.plots.common import short_label

        names = [short_label(it.label, 40) for it in self.items]
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        return f"posviz report: {shown}"

    @property
    def with_positions(self) -> list[ReportItem]:
        """Items that have a P = E Eᵀ."""
        return [it for it in self.items if it.has_positions]

    @property
    def runs(self) -> list[ReportItem]:
        """Items that are training runs."""
        return [it for it in self.items if it.kind == "run"]


def source_date() -> datetime:
    """The report's timestamp: ``SOURCE_DATE_EPOCH`` when set (reproducible builds), else now (UTC)."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch is not None and epoch.strip().isdigit():
        return datetime.fromtimestamp(int(epoch), tz=timezone.utc)
    return datetime.now(tz=timezone.utc)
