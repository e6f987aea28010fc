"""Fine-tuning tasks: a task spec becomes train and dev examples, labels and the metrics to report.

Task specs (see docs/finetune.md):

* ``glue/NAME``: a GLUE task through ``datasets`` (:mod:`~posviz.finetuning.glue`);
* ``csv:PATH`` / ``jsonl:PATH`` (``csv:TRAIN,DEV`` for a given dev file): local files with
  columns ``text``, ``label`` and optionally ``text_pair`` (:mod:`~posviz.finetuning.local`);
* ``builtin/bshift``, ``builtin/shuffled``, ``builtin/replaced``: offline tasks made from a corpus
  (:mod:`~posviz.finetuning.builtin`).

Every loader returns a :class:`~posviz.finetuning.taskdata.TaskData`, checked the same way.
"""

from __future__ import annotations

from collections.abc import Callable

from posviz.errors import OptionError
from posviz.finetuning.taskdata import BUILTIN_NAMES, GLUE_NAMES, Example, TaskData, TaskError, check_task


def check_spec(spec: str) -> None:
    """Raise :class:`TaskError` for a task spec no loader knows (before any data or model is read)."""
    kind, sep, rest = spec.partition(":")
    if sep and kind in ("csv", "jsonl") and rest:
        return
    if spec.startswith("glue/") and spec.removeprefix("glue/") not in GLUE_NAMES:
        raise TaskError(f"unknown GLUE task {spec.removeprefix('glue/')!r}", f"choose one of {', '.join(GLUE_NAMES)}")
    if spec.startswith("builtin/") and spec.removeprefix("builtin/") not in BUILTIN_NAMES:
        raise TaskError(f"unknown built-in task {spec.removeprefix('builtin/')!r}",
                        f"choose one of {', '.join('builtin/' + n for n in BUILTIN_NAMES)}")
    if not spec.startswith(("glue/", "builtin/")):
        raise TaskError(f"unknown task {spec!r}",
                        f"use glue/NAME ({', '.join(GLUE_NAMES)}), csv:PATH, jsonl:PATH or builtin/NAME ({', '.join(BUILTIN_NAMES)})")


def load_task(
    spec: str,
    *,
    train_size: int | None = None,
    dev_size: int | None = None,
    corpus: list[str] | None = None,
    fits: Callable[[str], bool] | None = None,
) -> TaskData:
    """Read a task spec into train and dev examples.

    Parameters
    ----------
    spec
        ``glue/NAME``, ``csv:PATH[,DEV]``, ``jsonl:PATH[,DEV]`` or ``builtin/NAME``.
    train_size, dev_size
        At most this many examples (a fixed, seeded subset; builtin tasks: how
        many to make, default 4000 and 1000).
    corpus
        Corpus specs of a built-in task (:func:`posviz.train.corpus.load_corpus`).
    fits
        ``fits(text)``: whether a text fits the model's positions once tokenised
        (built-in tasks keep only sentences that do, so that no word is cut off).

    Raises
    ------
    TaskError
        Unknown tasks, unreadable files, missing columns, empty splits, unseen dev labels.
    """
    check_spec(spec)
    kind, sep, rest = spec.partition(":")
    if sep and kind in ("csv", "jsonl"):
        from posviz.finetuning.local import load_local

        data = load_local(spec, kind, rest)
    elif spec.startswith("glue/"):
        from posviz.finetuning.glue import load_glue

        data = load_glue(spec)
    else:
        from posviz.finetuning.builtin import load_builtin

        data = load_builtin(spec, corpus=corpus, train_size=train_size or 4000, dev_size=dev_size or 1000, fits=fits)
    return check_task(subsample(data, train_size, dev_size))


def subsample(data: TaskData, train_size: int | None, dev_size: int | None) -> TaskData:
    """At most ``train_size`` training and ``dev_size`` examples per dev split, a fixed seeded subset."""
    import random

    def cut(examples: list[Example], n: int | None) -> list[Example]:
        if n is None or len(examples) <= n:
            return examples
        keep = sorted(random.Random(0).sample(range(len(examples)), n))
        return [examples[i] for i in keep]

    if train_size is not None and train_size < 1 or dev_size is not None and dev_size < 1:
        raise OptionError("--train-size and --dev-size must be at least 1")
    data.train = cut(data.train, train_size)
    data.dev = {k: cut(v, dev_size) for k, v in data.dev.items()}
    data.details = {**data.details, "train_examples": len(data.train), "dev_examples": {k: len(v) for k, v in data.dev.items()}}
    return data
