"""Splits of a task: examples made reproducibly from a seed, their SHA-256, and their token ids.

A split is every example of a task at some lengths, ``count`` per length, drawn from ``random.Random`` seeded by
the task, the split's purpose, the seed and the length (so that adding a length changes no other length's
examples). Its identity is the SHA-256 of its examples as canonical JSON: a run records it, and a result made from
other data is refused by comparing it.

The vocabulary is fixed per task: ``[PAD]``, ``[BOS]``, ``[SEP]`` (between question and answer), ``[EOS]``, ``[UNK]``
(never in a task's data: what a tokenizer of the task makes of other text), then the task's symbols in their listed order. A sequence is ``[BOS] question [SEP] answer [EOS]``; the loss and the
exact match are on the answer and ``[EOS]``.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass

from posviz.errors import OptionError
from posviz.tasks.generators import Example, get_task
from posviz.tasks.scan import REACHABLE

SPECIALS = ("[PAD]", "[BOS]", "[SEP]", "[EOS]", "[UNK]")


def task_vocabulary(name: str) -> dict[str, int]:
    """Symbol -> id for the task ``name`` (special tokens first)."""
    symbols = (*SPECIALS, *get_task(name).symbols)
    return {s: i for i, s in enumerate(dict.fromkeys(symbols))}


@dataclass(frozen=True)
class TaskSplit:
    """The examples of one split, by length.

    Attributes
    ----------
    task, purpose, seed
        What made it (``purpose``: ``train``, ``test``, ...).
    examples
        Length -> its examples ``(question, answer)``.
    sha256
        SHA-256 of the examples as canonical JSON (:meth:`canonical`).
    """

    task: str
    purpose: str
    seed: int
    examples: dict[int, list[Example]]
    sha256: str

    def canonical(self) -> bytes:
        """The examples as canonical JSON (sorted keys, no spaces): what :attr:`sha256` hashes."""
        return _canonical(self.task, self.examples)

    def encode(self, length: int) -> list[tuple[list[int], int]]:
        """Token ids of the examples of ``length``: ``([BOS] question [SEP] answer [EOS], index of the first answer token)``."""
        vocab = task_vocabulary(self.task)
        out = []
        for question, answer in self.examples[length]:
            ids = [vocab["[BOS]"], *(vocab[s] for s in question), vocab["[SEP]"]]
            start = len(ids)
            out.append((ids + [vocab[s] for s in answer] + [vocab["[EOS]"]], start))
        return out

    def identity(self) -> dict[str, object]:
        """What a run or a result records about the data it was made from."""
        return {"task": self.task, "purpose": self.purpose, "seed": self.seed,
                "lengths": sorted(self.examples), "examples_per_length": {str(k): len(v) for k, v in sorted(self.examples.items())},
                "sha256": self.sha256}


def _canonical(task: str, examples: dict[int, list[Example]]) -> bytes:
    body = {"task": task, "examples": {str(k): [[q, a] for q, a in v] for k, v in sorted(examples.items())}}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def make_split(task: str, lengths: Sequence[int], count: int, *, seed: int = 0, purpose: str = "train") -> TaskSplit:
    """``count`` examples of ``task`` at each of ``lengths``, drawn reproducibly from ``seed``.

    Raises
    ------
    OptionError
        An unknown task, a length the task cannot make, a count below 1.
    """
    spec = get_task(task)
    if count < 1:
        raise OptionError(f"{count} examples per length: need at least 1")
    examples: dict[int, list[Example]] = {}
    for n in sorted(set(lengths)):
        if n < spec.min_length:
            raise OptionError(f"task {task}: length {n} is below its shortest, {spec.min_length} {spec.what}")
        rng = random.Random(f"posviz-task:{task}:{purpose}:{seed}:{n}")  # a string seed: the same on every platform
        examples[n] = [spec.draw(rng, n) for _ in range(count)]
    digest = hashlib.sha256(_canonical(task, examples)).hexdigest()
    return TaskSplit(task=task, purpose=purpose, seed=seed, examples=examples, sha256=digest)


def task_positions(task: str, test_length: int) -> int:
    """The positions a model needs for ``task`` up to ``test_length``: the longest question and answer, plus
    ``[BOS]``, ``[SEP]`` and ``[EOS]``."""
    return get_task(task).span(test_length) + 3


def task_lengths(task: str, longest: int) -> list[int]:
    """Every length of ``task`` from its shortest to ``longest`` (SCAN: those some command reaches)."""
    spec = get_task(task)
    lengths = [n for n in range(spec.min_length, longest + 1) if task != "scan" or n in REACHABLE]
    if not lengths:
        raise OptionError(f"task {task}: no length from {spec.min_length} to {longest}")
    return lengths
