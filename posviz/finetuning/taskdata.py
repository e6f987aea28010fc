"""What a fine-tuning task is once read: examples, dev splits, labels, metrics, and the checks they pass.

Loaders (:mod:`~posviz.finetuning.glue`, :mod:`~posviz.finetuning.local`,
:mod:`~posviz.finetuning.builtin`) build a :class:`TaskData`; :func:`check_task`
checks every task the same way. :mod:`~posviz.finetuning.tasks` picks the loader.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from posviz.errors import PosvizError

#: The GLUE tasks ``glue/NAME`` accepts.
GLUE_NAMES: tuple[str, ...] = ("sst2", "mnli", "qqp", "stsb", "cola", "mrpc", "qnli", "rte")
#: The built-in offline tasks.
BUILTIN_NAMES: tuple[str, ...] = ("bshift", "shuffled", "replaced")
#: The held-out share of a local file given without a dev file.
DEV_FRACTION = 0.1


class TaskError(PosvizError):
    """A task that cannot be read or used: unknown, missing columns, empty splits, unseen labels."""


@dataclass(frozen=True)
class Example:
    """One example: a text, an optional second text, and its label (a class, or a float for regression)."""

    text: str
    text_pair: str | None
    label: Any


@dataclass
class TaskData:
    """A task ready for fine-tuning.

    Attributes
    ----------
    task
        The spec as given (``glue/sst2``, ``csv:train.csv``, ``builtin/bshift``).
    train
        Training examples.
    dev
        Dev splits by name: ``{"": [...]}`` for one split; MNLI has ``""`` (matched)
        and ``"mismatched"``. Metrics of a named split carry its name as a suffix
        (``accuracy_mismatched``).
    labels
        The class labels in id order, or ``None`` for regression.
    metrics
        The metrics to report (:data:`posviz.finetuning.metrics.METRICS`).
    details
        What the examples were made from (files and their checksums, corpus,
        sizes): part of the settings that decide whether results can be reused.
    """

    task: str
    train: list[Example]
    dev: dict[str, list[Example]]
    labels: list[Any] | None
    metrics: tuple[str, ...]
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def num_labels(self) -> int:
        """1 for regression, else the number of classes."""
        return 1 if self.labels is None else len(self.labels)

    def label_id(self, label: Any) -> Any:
        """The model's target for a label: its class id, or the float itself for regression."""
        return float(label) if self.labels is None else self.labels.index(label)

    def metric_names(self) -> list[str]:
        """The reported metric names, with the dev split suffixes (``accuracy``, ``accuracy_mismatched``)."""
        return [m + (f"_{split}" if split else "") for split in self.dev for m in self.metrics]


def check_task(data: TaskData) -> TaskData:
    """Raise :class:`TaskError` for an empty split, one class only, or a dev label never seen in training; return ``data``."""
    if not data.train:
        raise TaskError(f"task {data.task}: the training split is empty", "give a file with at least one example")
    if data.labels is not None and len(data.labels) < 2:  # one class would make a one-output (regression) head
        raise TaskError(f"task {data.task}: every training label is {data.labels[0]!r}; a classification task needs two or more",
                        "give examples of at least two labels, or real-valued labels for regression")
    for split, examples in data.dev.items():
        name = f"the {split + ' ' if split else ''}dev split"
        if not examples:
            raise TaskError(f"task {data.task}: {name} is empty", "give a dev file with examples, or more training examples to hold out")
        if data.labels is not None:
            unseen = sorted({repr(e.label) for e in examples} - {repr(x) for x in data.labels})
            if unseen:
                raise TaskError(f"task {data.task}: {name} has label(s) {', '.join(unseen[:5])} never seen in training",
                                f"training labels: {', '.join(map(repr, data.labels[:10]))}")
    return data


def labels_of(values: list[Any]) -> list[Any] | None:
    """The class labels of training labels in a fixed order, or ``None`` when they are real numbers (regression)."""
    if values and all(isinstance(v, float) for v in values):
        return None
    return sorted(set(values), key=lambda v: (not isinstance(v, (int, bool)), str(v) if not isinstance(v, (int, bool)) else int(v)))
