"""The measure contract: what a measure declares, and the options a series of checkpoints passes it.

Its parts are named as ``"module:attribute"`` strings and imported only when used, so the registry can be read
(``posviz --help``, ``posviz measures``) without importing torch or the measure's code, and a measure defined in
another package plugs in without posviz importing it first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from importlib import import_module
from typing import Any

from posviz.errors import OptionError

#: What a measure needs from a model: its weights alone, or a forward pass over text.
NEEDS = ("weights", "text")


@dataclass(frozen=True)
class SeriesOptions:
    """The options ``posviz trajectory`` passes to the measure of every checkpoint (each measure uses some of them).

    Attributes
    ----------
    corpus, seq_len, max_blocks
        Text measures: the fixed corpus (``None``: the packaged one), positions per block, blocks.
    layers, probe
        Layers measured; the content probe of position-only profiles.
    positions, table, normalize, null_draws, seed
        Weight measures of E_P: positions, which table, normalisation, null draws; ``seed`` of every random draw.
    allow_missing, cache
        Go on without checkpoints that cannot be had offline; read and write the posviz score cache.
    """

    corpus: str | None = None
    seq_len: int = 128
    max_blocks: int = 64
    layers: str | None = None
    probe: str | None = None
    positions: str | None = None
    table: str | None = None
    normalize: str = "none"
    null_draws: int = 10
    seed: int = 0
    allow_missing: bool = False
    cache: bool = True

    def given(self) -> list[str]:
        """The options set to something other than their default (a measure that does not use one refuses it)."""
        return [f.name for f in fields(self) if getattr(self, f.name) != f.default]


@dataclass(frozen=True)
class Measure:
    """One measure of how a model encodes position.

    Attributes
    ----------
    name
        Its name on the command line (``posviz trajectory --measure NAME``): lower case, digits and ``-``.
    summary
        One line: what it measures.
    needs
        ``weights`` (read from the checkpoint, no forward pass) or ``text`` (a forward pass over a corpus).
    reads
        What of the model it reads, in words (``"position table"``, ``"query/key weights"``, ``"attention inputs"``,
        ``"hidden states"``, ``"logits"``).
    options
        The :class:`SeriesOptions` it uses; a series given any other is refused.
    series
        ``"module:function"``: ``function(points, options) -> TrajectoryResult``, the measure along checkpoints
        (``points``: :class:`posviz.series.points` points, each with ``spec``, ``series`` and ``step``).
    point
        ``"module:function"``: ``function(source, options) -> dict[str, float]``, the measure of one checkpoint
        (``source``: a checkpoint folder, ``RUN@STEP`` or hub id). A measure gives ``series`` or ``point``; posviz makes
        the series of a ``point`` (and checks it, as every series).
    columns
        ``(key, label)`` of the numbers a row holds, for the table and figure a measure without its own shows.
    table, figure
        ``"module:function"``: ``table(result) -> str``; ``figure(result, band=..., keep_duplicates=...) -> Figure``.
    run
        ``"module:function"``: the library call that measures one model (``posviz.attention``), when there is one.
    command
        The ``posviz`` command that shows it on one model, when there is one.
    accumulator
        ``"module:class"``: what sums it over blocks of text (``add``) and across processes (``merge``), for text
        measures.
    request
        Text measures: ``"module:function"``, ``function(options: SeriesOptions)`` -> its request in posviz's one
        pass over text (:mod:`posviz.observe.text_pass`: ``name``, ``check()``, ``needs_eager()``,
        ``layer_count(loaded)``, ``layers``, ``observer(run, layers, batch_size)``; the observer's ``finish(run)`` is
        its result). Every text measure of a report, an explorer page or a series then shares the one pass.
    values
        ``"module:function"``: ``function(result) -> dict[str, float]``, the numbers of one model's result (the keys of
        ``columns``): a row of a series, a line of the report.
    plot
        ``"module:function"``: ``function(result, fig=None) -> Figure``, one model's figure drawn into ``fig`` (a
        new figure when ``None``; a report passes its page).
    rows
        Text measures, optional: ``"module:function"``, ``function(result, point, where) -> list[dict]``, the rows of
        one checkpoint of a series (``point``: its ``spec``, ``series`` and ``step``; ``where``: the corpus and its
        SHA-256). Without it a checkpoint's row is its ``values``.
    report
        ``"module:attribute"``: its own section of ``posviz report`` (a :class:`posviz.report.section.Section`), placed
        in registry order among the measures' sections. A text measure without one shows, when asked with
        ``--measure``, on the report's page of other measures on text (its ``plot`` or records, and ``values``).
    explorer
        ``"module:attribute"``: its own tab in ``posviz explore``, for a measure the page's script has a view of. A
        text measure's is a :class:`posviz.explorer.tab.ExplorerTab` among the corpus tabs
        (:data:`posviz.explorer.tab.PAGE_VIEWS`); a weight measure's a :class:`posviz.explorer.tab.WeightsTab`
        (:data:`posviz.explorer.tab.WEIGHT_VIEWS`: P, Heads). A text measure without one shows, when asked with
        ``--measure``, on the explorer's Measures tab (its ``values`` and records).
    origin
        The distribution that registered it (``posviz`` for its own).
    """

    name: str
    summary: str
    needs: str
    reads: tuple[str, ...] = ()
    options: frozenset[str] = frozenset()
    series: str | None = None
    point: str | None = None
    columns: tuple[tuple[str, str], ...] = ()
    table: str | None = None
    figure: str | None = None
    run: str | None = None
    command: str | None = None
    accumulator: str | None = None
    request: str | None = None
    values: str | None = None
    plot: str | None = None
    rows: str | None = None
    report: str | None = None
    explorer: str | None = None
    origin: str = "posviz"

    def __post_init__(self) -> None:
        problems = []
        if not re.fullmatch(r"[a-z][a-z0-9-]*", self.name or ""):
            problems.append(f"name {self.name!r} is not lower case letters, digits and '-'")
        if self.needs not in NEEDS:
            problems.append(f"needs {self.needs!r} is not one of {', '.join(NEEDS)}")
        if self.series and self.point:
            problems.append("it gives both series and point (one of them)")
        if self.point and not self.columns:
            problems.append("a point measure names its columns")
        if self.request and (self.needs != "text" or not self.values or not self.columns):
            problems.append("a measure with a text-pass request needs text, and gives its values and their columns")
        unknown = set(self.options) - {f.name for f in fields(SeriesOptions)}
        if self.explorer and self.needs == "text" and not self.request:
            problems.append("a text measure's explorer tab is drawn from its text-pass result: it needs a request")
        if unknown:
            problems.append(f"options {', '.join(sorted(unknown))} are not series options")
        if problems:
            raise OptionError(f"measure {self.name!r}: {'; '.join(problems)}")

    @property
    def has_series(self) -> bool:
        """Whether it runs along checkpoints (``posviz trajectory``): a series, a point, or a text-pass request."""
        return bool(self.series or self.point or self.request)

    def load(self, part: str) -> Any:
        """The object that the ``"module:attribute"`` string of ``part`` (``series``, ``point``, ``table``, ...) names."""
        target = getattr(self, part)
        if not target:
            raise OptionError(f"measure {self.name!r} has no {part}")
        module, _, attribute = target.partition(":")
        obj: Any = import_module(module)
        for name in attribute.split("."):
            obj = getattr(obj, name)
        return obj
