"""Can a checkpoint series be trusted? Duplicated, mislabelled and discontinuous checkpoints (``posviz trajectory``).

Public series serve wrong checkpoints under step labels (Pythia branches that serve
the final model, a first shard that is another step's; see docs/trajectory.md). Before
a trajectory is drawn, every checkpoint of it is fingerprinted (:func:`fingerprints`)
by what the measure traces: E_P for learned absolute positions, layer L's query/key
projections for RoPE models. Then :func:`judge` finds

* **duplicates**: checkpoints whose files holding the traced tensors have one content
  hash (:func:`posviz.read.fingerprints.file_digest`: the Hub's LFS SHA-256 without
  downloading, a run's manifest), or whose traced tensors are equal byte for byte
  (:func:`posviz.read.fingerprints.tensor_digest`: the same tensors in different
  files). Every member of such a group is marked and names another member: the bytes
  cannot tell which label is genuine;
* **suspects**: a checkpoint much farther from both neighbours of its series than they
  are from each other. With the relative Frobenius distance
  ``d(A, B) = ||A - B||_F / ((||A||_F + ||B||_F) / 2)`` of the traced tensors, a checkpoint
  ``b`` between ``a`` and ``c`` (by step, duplicates left out) is suspect when
  ``min(d(b, a), d(b, c)) > SUSPECT_RATIO * d(a, c)``. Along a genuine path the nearer
  neighbour is at most about as far as the two neighbours are from each other (half of
  it on a straight path, 0.71 on a random walk), so 3 leaves a wide margin. The first and
  last checkpoint of a series have one neighbour and are not tested.

:func:`mark_rows` writes the verdicts into the rows of any measure: ``duplicate_of``,
``suspect``, ``reason`` and the three distances.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from posviz.series.points import SeriesPoint

if TYPE_CHECKING:
    import numpy as np

#: A checkpoint is suspect when its nearer neighbour is more than this many times as far as its neighbours are apart.
SUSPECT_RATIO = 3.0
#: Fields :func:`mark_rows` adds to every row.
FIELDS = ("duplicate_of", "suspect", "reason", "distance_prev", "distance_next", "distance_neighbours")


@dataclass(frozen=True)
class Trace:
    """What a measure reads of each checkpoint, and so what the checks compare.

    Attributes
    ----------
    kind
        ``positions`` (E_P), ``rope`` (one layer's query/key projections) or ``auto``
        (E_P where the model has a position table, else RoPE's layer; else files only).
    positions, table
        The rows and table of E_P (``--positions``, ``--table``).
    layer
        The RoPE layer traced.
    """

    kind: str = "auto"
    positions: str | None = None
    table: str | None = None
    layer: int = 0


@dataclass
class Fingerprint:
    """What one checkpoint holds: content hashes of its traced files and tensors, and the tensors themselves."""

    point: SeriesPoint
    label: str
    what: str = ""
    files: dict[str, str] = field(default_factory=dict)
    tensors: str | None = None
    vector: np.ndarray | None = None
    problem: str | None = None
    traced: bool = False  # tensors were read: :func:`load_vector` can read them again

    def has_vector(self) -> bool:
        """True when the traced tensors are held or can be read again."""
        return self.vector is not None or self.traced

    @property
    def file_key(self) -> tuple[str, ...] | None:
        """The content hashes of the files holding the traced tensors, when every one is known."""
        return tuple(sorted(self.files.values())) if self.files else None


@dataclass
class Verdict:
    """What the checks found about one checkpoint (see the module docstring)."""

    duplicate_of: str | None = None
    suspect: bool = False
    reason: str | None = None
    distance_prev: float | None = None
    distance_next: float | None = None
    distance_neighbours: float | None = None

    @property
    def flagged(self) -> bool:
        """A duplicate or a suspect: drawn hollow and left out of lines."""
        return self.duplicate_of is not None or self.suspect

    def fields(self) -> dict[str, Any]:
        """The row fields (:data:`FIELDS`)."""
        return {k: getattr(self, k) for k in FIELDS}


def point_label(p: SeriesPoint) -> str:
    """How a checkpoint is named in verdicts: a revision by its name, a run's checkpoint as ``RUN@STEP``, else its spec."""
    repo, at, rev = p.spec.partition("@")
    if at and repo == p.series:
        return rev
    if Path(p.spec).name.startswith("checkpoint-") and Path(p.spec).parent == Path(p.series):
        return f"{p.series}@{p.step}"
    return p.spec


def _rope_tensors(ckpt, layer: int) -> dict[str, str]:
    from posviz.read.rope_layouts import rope_layout

    layout = rope_layout(ckpt.config)
    modules = (layout.query, layout.key) if layout.key else (layout.query,)
    return {f"layer {layer} {m}": ckpt.require(layout.name(m, layer) + ".weight", "query/key projection") for m in modules}


def _traced(source, ckpt, trace: Trace) -> tuple[str, dict[str, np.ndarray], list[str]]:
    """``(what, {role: tensor}, files holding them)`` of ``source`` (opened as ``ckpt``) as ``trace`` says.

    With no tensor to trace (``auto`` for a model with neither E_P nor RoPE), the one
    weight file of an unsharded checkpoint is compared as a whole; a sharded one not at all.
    """
    from posviz.read.embeddings import load_position_embeddings
    from posviz.read.families import family_for_config

    family = family_for_config(source.config) if source.config else None
    rotary = family is not None and family.scheme == "rotary"
    # a table computed from the config (posviz sinusoidal) is the same in every checkpoint: the weights are traced instead
    fixed = family is not None and bool(family.tables) and bool(family.tables[0].fixed)
    if (trace.kind == "positions" and not fixed) or (trace.kind == "auto" and family is not None and family.tables and not fixed):
        pe = load_position_embeddings(source, table=trace.table, positions=trace.positions, checkpoint=ckpt)
        return "E_P", {"E_P": pe.matrix}, ckpt.files_for([pe.tensor])
    if trace.kind == "rope" or (trace.kind == "auto" and rotary):
        names = _rope_tensors(ckpt, trace.layer)
        tensors = {role: ckpt.read(n) for role, n in names.items()}
        return f"layer {trace.layer} query/key", tensors, ckpt.files_for(names.values())
    whole = [f for f in source.files[:1] if not f.endswith(".index.json")]
    return "weights", {}, whole


#: Traced tensors are held (as float32) for the distance test up to this many elements in all; past it they are read
#: again, three at a time (:func:`load_vector`). 2**26: 256 MiB, 170 BERT position tables.
HOLD_ELEMENTS = 2**26


def fingerprint(point: SeriesPoint, trace: Trace, keep: bool | Callable[[int], bool] = False) -> Fingerprint:
    """Fingerprint one checkpoint; a checkpoint that cannot be read gets ``problem`` instead (nothing raised).

    With ``keep`` (or ``keep(elements)`` true) the traced tensors are held as float32 (``vector``); else they
    are read again when needed (:func:`load_vector`), so that a long series of large tensors is never held at once.
    """
    from posviz.errors import PosvizError
    from posviz.read.checkpoints import Checkpoint
    from posviz.read.sources import resolve_source

    try:
        source = resolve_source(point.spec)
        ckpt = Checkpoint(source)
        what, tensors, files = _traced(source, ckpt, trace)
        return _fingerprint_of(point, source, what, tensors, files, ckpt.opened(), keep)
    except PosvizError as e:
        return Fingerprint(point, point_label(point), problem=e.message)


def _fingerprint_of(point: SeriesPoint, source, what: str, tensors: dict[str, np.ndarray], files: list[str],
                    opened: dict[str, Any] | None, keep: bool | Callable[[int], bool]) -> Fingerprint:
    """The fingerprint of tensors read from ``source`` (``files``: those holding them; ``opened``: its open files)."""
    import numpy as np

    from posviz.read.fingerprints import file_digests, tensor_digest

    fp = Fingerprint(point, point_label(point), what)
    digests = file_digests(source, files, opened)
    fp.files = {f: d for f, d in digests.items() if d} if all(digests.values()) else {}
    if tensors:
        fp.tensors, fp.traced = tensor_digest(tensors), True
        if keep is True or (callable(keep) and keep(sum(t.size for t in tensors.values()))):
            fp.vector = _flat(tensors).astype(np.float32)
    return fp


def holding_budget(limit: int = HOLD_ELEMENTS) -> Callable[[int], bool]:
    """``keep(elements)``: true while the tensors held so far and these stay within ``limit`` elements (thread-safe)."""
    held, lock = [0], threading.Lock()

    def keep(elements: int) -> bool:
        with lock:
            if held[0] + elements > limit:
                return False
            held[0] += elements
            return True

    return keep


class Collector:
    """Fingerprints taken as a measure reads E_P (``on_read`` of :func:`posviz.series.points.series_rows`).

    The checks then read nothing again for those checkpoints (:func:`check_series` with ``known``).
    """

    def __init__(self, trace: Trace) -> None:
        self.trace, self.keep = trace, holding_budget()
        self.found: dict[tuple[str, int], Fingerprint] = {}
        self._lock = threading.Lock()

    def __call__(self, point: SeriesPoint, source: Any, embeddings: Any) -> None:
        from posviz.errors import PosvizError
        from posviz.read.fingerprints import files_holding

        if getattr(embeddings, "fixed", None):
            return  # computed, not read: the checkpoint is fingerprinted by its weights later
        try:
            files = files_holding(source, [embeddings.tensor])
            fp = _fingerprint_of(point, source, "E_P", {"E_P": embeddings.matrix}, files, None, self.keep)
        except PosvizError:
            return  # fingerprinted on its own later, where the problem is reported
        with self._lock:
            self.found[(point.series, point.step)] = fp


def _flat(tensors: dict[str, np.ndarray]) -> np.ndarray:
    import numpy as np

    return np.concatenate([np.ravel(tensors[k]) for k in sorted(tensors)])


def load_vector(fp: Fingerprint, trace: Trace) -> np.ndarray | None:
    """The traced tensors of a fingerprinted checkpoint, flat: held, or read again (from the local copies now)."""
    if fp.vector is not None or not fp.traced:
        return fp.vector
    from posviz.errors import PosvizError
    from posviz.read.checkpoints import Checkpoint
    from posviz.read.sources import resolve_source

    try:
        source = resolve_source(fp.point.spec)
        return _flat(_traced(source, Checkpoint(source), trace)[1]).astype("float32")  # as held: the same distances
    except PosvizError:  # gone since it was fingerprinted: not tested
        return None


def fingerprints(points: Sequence[SeriesPoint], trace: Trace, keep: Callable[[int], bool] | None = None) -> list[Fingerprint]:
    """:func:`fingerprint` of every point, in order, by the fetch pool (``POSVIZ_FETCH_WORKERS``)."""
    from concurrent.futures import ThreadPoolExecutor

    from posviz.scoring.batch import fetch_workers
    from posviz.util.progress import quiet_bytes

    keep = keep or holding_budget()

    def work(p: SeriesPoint) -> Fingerprint:
        with quiet_bytes():
            return fingerprint(p, trace, keep)

    with ThreadPoolExecutor(max_workers=max(1, min(fetch_workers(), len(points))), thread_name_prefix="posviz-check") as pool:
        return list(pool.map(work, points))


def relative_distance(a: np.ndarray, b: np.ndarray) -> float:
    """``||a - b||_F / ((||a||_F + ||b||_F) / 2)`` (0 for two zero tensors)."""
    import numpy as np

    # In the arrays' own type (float32 copies: exact differences of float32 values up to rounding, 1e-7 relative).
    scale = (float(np.linalg.norm(a)) + float(np.linalg.norm(b))) / 2
    return float(np.linalg.norm(np.subtract(a, b))) / scale if scale > 0 else 0.0


def _groups(fps: Sequence[Fingerprint]) -> list[list[int]]:
    """Indices of fingerprints with one file content or one tensor content, groups of two or more."""
    parent = list(range(len(fps)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first: dict[tuple[str, Any], int] = {}
    for i, fp in enumerate(fps):
        for key in (("files", fp.file_key), ("tensors", fp.tensors)):
            if key[1] is None:
                continue
            j = first.setdefault(key, i)
            parent[root(i)] = root(j)
    out: dict[int, list[int]] = {}
    for i in range(len(fps)):
        out.setdefault(root(i), []).append(i)
    return [g for g in out.values() if len(g) > 1]


def _duplicate_reason(fp: Fingerprint, other: Fingerprint) -> str:
    away = abs(other.point.step - fp.point.step)
    where = f" (step {other.point.step}, {away} steps away)" if away else f" (step {other.point.step})"
    if fp.file_key is not None and fp.file_key == other.file_key:
        files = ", ".join(sorted(fp.files))
        digest = next(iter(sorted(fp.files.values())))
        return f"serves the same {files} as {other.label}{where}: content hash {digest[:12]}…"
    return f"its {fp.what} is byte for byte that of {other.label}{where}, in a different file"


def _mark_duplicates(fps: Sequence[Fingerprint], verdicts: list[Verdict]) -> set[int]:
    flagged: set[int] = set()
    for group in _groups(fps):
        for i in group:
            # The member farthest away in steps (ties: the later step, then the label): the strongest sign.
            j = max((k for k in group if k != i),
                    key=lambda k: (abs(fps[k].point.step - fps[i].point.step), fps[k].point.step, fps[k].label))
            verdicts[i].duplicate_of = fps[j].label
            verdicts[i].reason = _duplicate_reason(fps[i], fps[j])
            flagged.add(i)
    return flagged


def _vectors(fps: Sequence[Fingerprint], seq: list[int], trace: Trace | None) -> Iterator[tuple[int, np.ndarray | None]]:
    """``(index, vector)`` along ``seq``, read again in parallel a few at a time (never the whole series at once)."""
    if trace is None or all(fps[i].vector is not None for i in seq):  # all held: nothing to read
        yield from ((i, fps[i].vector) for i in seq)
        return
    from concurrent.futures import ThreadPoolExecutor

    from posviz.scoring.batch import fetch_workers

    width = max(1, fetch_workers())
    with ThreadPoolExecutor(max_workers=width, thread_name_prefix="posviz-check") as pool:
        for at in range(0, len(seq), width):
            chunk = seq[at:at + width]
            yield from zip(chunk, pool.map(lambda i: load_vector(fps[i], trace), chunk), strict=True)


def _mark_discontinuities(fps: Sequence[Fingerprint], verdicts: list[Verdict], skip: set[int], ratio: float,
                          trace: Trace | None) -> None:
    by_series: dict[str, list[int]] = {}
    for i in sorted(range(len(fps)), key=lambda i: fps[i].point.step):
        if i not in skip and fps[i].has_vector():
            by_series.setdefault(fps[i].point.series, []).append(i)
    for seq in by_series.values():
        window: list[tuple[int, np.ndarray | None]] = []
        for item in _vectors(fps, seq, trace):
            window = [*window[-2:], item]  # three at a time: a long series is never held whole
            if len(window) == 3:
                _judge_middle(fps, verdicts, window, ratio)


def _judge_middle(fps: Sequence[Fingerprint], verdicts: list[Verdict], window: list[tuple[int, Any]], ratio: float) -> None:
    """Test the middle of three consecutive checkpoints ``(index, vector)`` (module docstring)."""
    (a, va), (b, vb), (c, vc) = window
    if va is None or vb is None or vc is None or not va.shape == vb.shape == vc.shape:
        return
    v = verdicts[b]
    v.distance_prev, v.distance_next = relative_distance(vb, va), relative_distance(vb, vc)
    v.distance_neighbours = relative_distance(va, vc)
    near = min(v.distance_prev, v.distance_next)
    if near > ratio * v.distance_neighbours:
        v.suspect = True
        times = f"{near / v.distance_neighbours:.1f}×" if v.distance_neighbours > 0 else "infinitely"
        v.reason = (f"its {fps[b].what} is {times} farther from both neighbours than they are from each other "
                    f"(relative distance {v.distance_prev:.3g} to {fps[a].label}, {v.distance_next:.3g} to "
                    f"{fps[c].label}, {v.distance_neighbours:.3g} between them; threshold {ratio:g}×)")


def judge(fps: Sequence[Fingerprint], ratio: float = SUSPECT_RATIO, trace: Trace | None = None) -> list[Verdict]:
    """The verdict on each fingerprint, in order (duplicates first, then discontinuities among the rest).

    ``trace`` reads again the tensors of fingerprints that do not hold them (:func:`load_vector`).
    """
    verdicts = [Verdict() for _ in fps]
    checked = [i for i, fp in enumerate(fps) if fp.problem is None]
    dup = _mark_duplicates([fps[i] for i in checked], [verdicts[i] for i in checked])
    skip = {checked[i] for i in dup} | {i for i, fp in enumerate(fps) if fp.problem is not None}
    _mark_discontinuities(fps, verdicts, skip, ratio, trace)
    for fp, v in zip(fps, verdicts, strict=True):
        if fp.problem is not None:
            v.reason = f"not checked: {fp.problem}"
    return verdicts


def check_series(points: Sequence[SeriesPoint], trace: Trace, ratio: float = SUSPECT_RATIO,
                 collected: Collector | None = None) -> dict[tuple[str, int], Verdict]:
    """Fingerprint and judge every point: ``{(series, step): verdict}``.

    ``collected`` holds fingerprints taken while the measure read the checkpoints; only the others are read here.
    """
    known = collected.found if collected is not None else {}
    rest = [p for p in points if (p.series, p.step) not in known]
    fresh = dict(zip(rest, fingerprints(rest, trace, collected.keep if collected else None), strict=True)) if rest else {}
    fps = [known.get((p.series, p.step)) or fresh[p] for p in points]
    return {(fp.point.series, fp.point.step): v for fp, v in zip(fps, judge(fps, ratio, trace), strict=True)}


def check_rows(rows: list[dict[str, Any]], points: Sequence[SeriesPoint], trace: Trace, *more_rows: list[dict[str, Any]],
               collected: Collector | None = None, ratio: float = SUSPECT_RATIO) -> list[str]:
    """Check the series that gave ``rows`` and mark them (and ``more_rows``) in place; returns the warning lines.

    Parameters
    ----------
    rows
        Rows of any measure, each with ``series`` and ``step``.
    points
        The checkpoints; only those that gave rows are checked (``--allow-missing`` leaves some out).
    trace
        What the measure reads of each checkpoint.
    more_rows
        Other rows of the same checkpoints to mark (``--measure bands``: the per-layer summary).
    collected
        Fingerprints taken while the measure read the checkpoints (:class:`Collector`).
    ratio
        The suspect threshold (:data:`SUSPECT_RATIO`).
    """
    present = {(r["series"], r["step"]) for r in rows}
    checked = [p for p in points if (p.series, p.step) in present]
    verdicts = check_series(checked, trace, ratio, collected)
    for rs in (rows, *more_rows):
        mark_rows(rs, verdicts)
    return summary_lines(verdicts, {(p.series, p.step): point_label(p) for p in checked})


def mark_rows(rows: Iterable[dict[str, Any]], verdicts: dict[tuple[str, int], Verdict]) -> None:
    """Add :data:`FIELDS` to every row that has ``series`` and ``step`` (rows of any measure, in place)."""
    for r in rows:
        v = verdicts.get((r.get("series"), r.get("step")))
        r.update((v or Verdict()).fields())


def summary_lines(verdicts: dict[tuple[str, int], Verdict], labels: dict[tuple[str, int], str]) -> list[str]:
    """The warning lines: one for duplicates, one for suspects, one for checkpoints not checked (only those that apply)."""
    total = len(verdicts)
    dups = [(labels[k], v.duplicate_of) for k, v in verdicts.items() if v.duplicate_of is not None]
    sus = [labels[k] for k, v in verdicts.items() if v.suspect]
    unchecked = [labels[k] for k, v in verdicts.items() if (v.reason or "").startswith("not checked")]
    out = []
    if dups:
        out.append(f"{len(dups)} of {total} checkpoints repeat another: {', '.join(f'{a} = {b}' for a, b in dups)}")
    if sus:
        out.append(f"{len(sus)} of {total} checkpoints break from both neighbours (suspect): {', '.join(sus)}")
    if unchecked:
        out.append(f"{len(unchecked)} of {total} checkpoints could not be checked for duplicates: {', '.join(unchecked)}")
    return out


def flagged(row: dict[str, Any]) -> bool:
    """True for a row marked duplicate or suspect (figures draw it hollow and leave it out of lines)."""
    return row.get("duplicate_of") is not None or bool(row.get("suspect"))
