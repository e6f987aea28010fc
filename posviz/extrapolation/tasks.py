"""``posviz extrapolate RUN --task NAME``: length generalisation on an algorithmic task.

At each of the task's own lengths (items to copy, digits to add; not token windows) the model answers ``examples``
test questions, drawn reproducibly (:func:`posviz.tasks.make_split`, purpose ``test``, its SHA-256 recorded). Per
length: **exact match** (greedy decoding writes the whole answer and stops; computed under teacher forcing, which is
the same condition, :func:`posviz.train.task_data.answer_scores`), answer-token accuracy, the loss on the answer and
``[EOS]``, and the attention statistics of ``posviz extrapolate`` on the same examples
(:func:`posviz.extrapolation.evaluate.run_length`, tiled or eager as there).

Only task runs are evaluated, and only on their own task: the run's ``run.json`` names it. A length whose sequences
need more positions than a learned table has is recorded with that reason, as text lengths are.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from posviz.errors import OptionError
from posviz.extrapolation.result import HEAD_FIELDS, head_means, head_rows

#: Seed of every test split (test examples do not change with the model's seed, so runs compare on one set).
TEST_SEED = 0


@dataclass(frozen=True)
class TaskLengthRecord:
    """One model at one task length.

    Attributes
    ----------
    model, length
        The model as named in outputs; the task's own length.
    train_length
        The longest length the run trained on.
    positions
        Tokens of the longest example at this length (``[BOS]`` question ``[SEP]`` answer ``[EOS]``).
    accuracy, token_accuracy, loss
        Exact match (0-1), answer-token accuracy, mean NLL of the answer tokens and ``[EOS]`` (nats); ``None`` with ``reason``.
    examples, tokens
        Examples answered; answer tokens scored.
    heads
        Per layer: each of :data:`~posviz.extrapolation.result.HEAD_FIELDS` per head, ``(heads,)``, averaged over the
        examples (weighted by their number where examples of one length differ in tokens).
    profiles
        Per layer, ``(heads, 2 * positions - 1)``: the offset profile, the mean attention weight at each offset
        ``key - query`` from ``-(positions - 1)`` to ``positions - 1`` (NaN where no query has a key at that offset),
        averaged over the examples as ``heads`` are, each over those that have the offset.
    """

    model: str
    length: int
    train_length: int | None
    positions: int
    accuracy: float | None
    token_accuracy: float | None
    loss: float | None
    reason: str | None = None
    examples: int = 0
    tokens: int = 0
    heads: dict[int, dict[str, np.ndarray]] = field(default_factory=dict, repr=False)
    profiles: dict[int, np.ndarray] = field(default_factory=dict, repr=False)

    def head_rows(self) -> list[dict[str, Any]]:
        """One dict per (layer, head)."""
        return head_rows(self.heads)

    def means(self) -> dict[str, float | None]:
        """Each per-head field averaged over every measured head (``None`` when the length did not run)."""
        return head_means(self.head_rows())


@dataclass(frozen=True)
class TaskResult:
    """Exact match, accuracy, loss and attention statistics of task runs at several lengths of one task.

    Attributes
    ----------
    runs
        One :class:`TaskLengthRecord` per model and length.
    task, lengths, examples
        The task, its lengths (ascending) and the test examples per length.
    data
        The test split's identity (:meth:`posviz.tasks.TaskSplit.identity`: its SHA-256 among them).
    exact_maps
        Whether the attention statistics were summed from eager maps.
    """

    runs: list[TaskLengthRecord]
    task: str
    lengths: list[int]
    examples: int
    data: dict[str, Any]
    exact_maps: bool = False

    @property
    def conventions(self) -> str:
        """One line stating how the numbers were made."""
        return (f"Task {self.task}: {self.examples} test examples per length (seed {TEST_SEED}, sha256 {self.data['sha256'][:12]}); "
                "accuracy: exact match under greedy decoding (every answer token and [EOS] the argmax given the answer before "
                "it); loss and token accuracy on the answer and [EOS]; attention as posviz extrapolate, on the same examples")

    def records(self) -> list[dict[str, Any]]:
        """One JSON-ready dict per model and length, its heads as a list of dicts."""
        return [{"model": r.model, "task": self.task, "length": r.length, "train_length": r.train_length,
                 "positions": r.positions, "accuracy": r.accuracy, "token_accuracy": r.token_accuracy, "loss": r.loss,
                 "reason": r.reason, "examples": r.examples, "tokens": r.tokens, "data_sha256": self.data["sha256"],
                 "heads": r.head_rows()} for r in self.runs]

    def profile_records(self) -> list[dict[str, Any]]:
        """Long format of the offset profiles: one dict per model, length, layer, head and offset that some query has."""
        rows = []
        for r in self.runs:
            for layer, profile in r.profiles.items():
                half = (profile.shape[-1] - 1) // 2
                for head, offset in zip(*np.nonzero(np.isfinite(profile)), strict=True):
                    rows.append({"model": r.model, "length": r.length, "layer": layer, "head": int(head),
                                 "offset": int(offset) - half, "weight": float(profile[head, offset])})
        return rows

    def flat_records(self) -> list[dict[str, Any]]:
        """Long format: one dict per model, length, layer and head (a length that did not run: one row, no head)."""
        rows = []
        for rec in self.records():
            heads = rec.pop("heads")
            for h in heads or [{"layer": None, "head": None, **dict.fromkeys(HEAD_FIELDS)}]:
                rows.append({**rec, **h})
        return rows

    def to_frame(self) -> Any:
        """The records as a pandas DataFrame, one row per model × length × layer × head."""
        import pandas as pd

        return pd.DataFrame(self.flat_records())


def parse_task_lengths(task: str, lengths: str | Sequence[int]) -> list[int]:
    """``"10,40"`` (or ints) → the task's lengths, ascending; each one the task can make."""
    from posviz.tasks import get_task
    from posviz.tasks.scan import REACHABLE

    spec = get_task(task)
    items = [x.strip() for x in lengths.split(",")] if isinstance(lengths, str) else list(lengths)
    out = set()
    for x in items:
        try:
            value = int(x)
        except (TypeError, ValueError):
            raise OptionError(f"--lengths: {x!r} is not a length of task {task} (an integer)", "for example --lengths 10,20,40") from None
        if value < spec.min_length or (task == "scan" and value not in REACHABLE):
            raise OptionError(f"--lengths: task {task} has no length {value} ({spec.what})",
                              "SCAN lengths: those some command denotes" if task == "scan" else f"from {spec.min_length} up")
        out.add(value)
    if not out:
        raise OptionError("--lengths is empty", "for example --lengths 10,20,40")
    return sorted(out)


def run_task(spec: str, task: str) -> dict[str, Any]:
    """The task options a model's run recorded, checked to be those of ``task``.

    ``spec`` is ``RUN``, ``RUN@STEP`` or a checkpoint folder of a run. A run trained on text, or on another task,
    is refused (its model would be scored on data it never saw the like of).
    """
    from posviz.read.runs import run_reference
    from posviz.train.task_data import recorded_task

    found = run_reference(spec)
    folder = Path(found[0]) if found else Path(spec).expanduser().parent
    recorded = recorded_task(folder)
    if recorded is None:
        raise OptionError(f"{spec} is not a posviz train --task run (its run.json names no task)",
                          "--task evaluates runs trained with posviz train --task; drop --task for text")
    if recorded["task"] != task:
        raise OptionError(f"{spec} was trained on task {recorded['task']}, not {task}", f"evaluate it with --task {recorded['task']}")
    return recorded


def task_model_records(spec: str, task: str, lengths: list[int], *, examples: int, layers: Any, batch_size: int,
                       device: str | None, exact_maps: bool) -> list[TaskLengthRecord]:
    """Every length of one task run (``spec``: ``RUN``, ``RUN@STEP`` or one of its checkpoints)."""
    from posviz.observe.loading import load_model
    from posviz.observe.tiled.run import can_capture
    from posviz.scoring.layers import parse_layers
    from posviz.tasks import make_split

    recorded = run_task(spec, task)
    tiled = not exact_maps and can_capture() is None
    loaded = load_model(spec, device=device, with_tokenizer=False, head="causal-lm", attn_implementation=None if tiled else "eager")
    chosen = parse_layers(None, layers, loaded.num_layers, loaded.label)
    table = loaded.table_positions
    out = []
    for length in lengths:
        encoded = make_split(task, [length], examples, seed=TEST_SEED, purpose="test").encode(length)
        positions = max(len(ids) for ids, _ in encoded)
        common = dict(model=loaded.label, length=length, train_length=recorded["train_length"], positions=positions)
        if table is not None and positions > table:
            out.append(TaskLengthRecord(accuracy=None, token_accuracy=None, loss=None, **common,
                                        reason=f"its examples need {positions} positions, beyond the model's learned table ({table})"))
            continue
        out.append(_one_length(loaded.model, encoded, chosen, batch_size=batch_size, tiled=tiled, common=common))
    return out


def _one_length(model: Any, encoded: list[tuple[list[int], int]], layers: list[int], *, batch_size: int, tiled: bool,
                common: dict[str, Any]) -> TaskLengthRecord:
    """Exact match, accuracy, loss and attention statistics over the examples of one length (grouped by token count)."""
    from posviz.extrapolation.blocks import LengthBlocks
    from posviz.extrapolation.evaluate import run_length

    groups: dict[int, list[tuple[list[int], int]]] = {}
    for ids, start in encoded:
        groups.setdefault(len(ids), []).append((ids, start))
    nll = tokens = correct = exact = 0.0
    heads: dict[int, dict[str, np.ndarray]] = {}
    positions = max(groups)
    profiles: dict[int, np.ndarray] = {}
    weights: dict[int, np.ndarray] = {}
    for _, items in sorted(groups.items()):  # one batch shape per token count
        ids = np.array([x for x, _ in items], dtype=np.int64)
        scored = np.zeros_like(ids, dtype=bool)
        for row, (_, start) in enumerate(items):
            scored[row, start:] = True  # the answer and [EOS]: predicted from the token before each
        blocks = LengthBlocks(inputs=ids, targets=ids, scored=scored, text_tokens=0, stride=None)
        done = run_length(model, blocks, layers, objective="causal", batch_size=batch_size, tiled=tiled, answers=True)
        nll, tokens = nll + done.nll, tokens + done.tokens
        correct, exact = correct + done.tokens_right, exact + done.windows_right
        weight = len(items) / len(encoded)
        for layer, st in done.heads.items():
            into = heads.setdefault(layer, {k: np.zeros_like(getattr(st, k), dtype=float) for k in HEAD_FIELDS})
            for k in HEAD_FIELDS:
                into[k] += weight * np.asarray(getattr(st, k), dtype=float)
            _add_profile(profiles, weights, layer, st.profiles, weight, positions)
    with np.errstate(invalid="ignore", divide="ignore"):
        profiles = {layer: np.where(weights[layer] > 0, p / weights[layer], np.nan) for layer, p in profiles.items()}
    return TaskLengthRecord(accuracy=exact / len(encoded), token_accuracy=correct / tokens, loss=nll / tokens,
                            examples=len(encoded), tokens=int(tokens), heads=heads, profiles=profiles, **common)


def _add_profile(sums: dict[int, np.ndarray], weights: dict[int, np.ndarray], layer: int, profile: np.ndarray,
                 weight: float, positions: int) -> None:
    """Add one token count's offset profile ``(heads, 2n - 1)``, centred, into sums over ``2 * positions - 1`` offsets."""
    heads, width = profile.shape
    lo = positions - 1 - (width - 1) // 2
    into = sums.setdefault(layer, np.zeros((heads, 2 * positions - 1)))
    seen = weights.setdefault(layer, np.zeros((heads, 2 * positions - 1)))
    present = np.isfinite(profile)
    into[:, lo : lo + width] += np.where(present, weight * profile, 0.0)
    seen[:, lo : lo + width] += np.where(present, weight, 0.0)
