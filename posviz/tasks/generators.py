"""The tasks: each draws an example ``(question, answer)`` of a given length, as lists of symbols.

Lengths are the task's own, as in Kazemnejad et al. (NeurIPS 2023): the items to copy, reverse or sort, the digits of
each addend, the bits of the parity string, the actions of a SCAN command. Their default splits: copy and reverse
trained up to 20 and tested up to 40; addition, parity and sorting 8 and 16; SCAN 22 and 48 (its length split).
Every answer is computed from the question alone (the tests recompute it independently).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from posviz.errors import OptionError
from posviz.tasks import scan

DIGITS = tuple("0123456789")
#: Symbols of copy and reverse: 16 letters (the pilot in the reference notes learns copy over 16 symbols).
LETTERS = tuple("abcdefghijklmnop")

Example = tuple[list[str], list[str]]


@dataclass(frozen=True)
class Task:
    """One algorithmic task.

    Attributes
    ----------
    name
        As ``posviz train --task`` names it.
    symbols
        Every symbol its questions and answers use (besides the vocabulary's special tokens).
    train_length, test_length
        The default longest length trained on and tested on (Kazemnejad et al.'s splits).
    min_length
        The shortest length it can make.
    draw
        ``draw(rng, length)``: one example of that length.
    what
        What its length counts, for messages and tables.
    span
        ``span(length)``: the most symbols that question and answer together have at that length (the model's
        positions must cover it, plus the three special tokens, at the longest length tested).
    """

    name: str
    symbols: tuple[str, ...]
    train_length: int
    test_length: int
    min_length: int
    draw: Callable[[random.Random, int], Example]
    what: str
    span: Callable[[int], int]


def _copy(rng: random.Random, n: int) -> Example:
    items = [rng.choice(LETTERS) for _ in range(n)]
    return items, list(items)


def _reverse(rng: random.Random, n: int) -> Example:
    items = [rng.choice(LETTERS) for _ in range(n)]
    return items, items[::-1]


def _number(rng: random.Random, n: int) -> str:
    """A number of exactly ``n`` digits (no leading zero unless n is 1)."""
    return str(rng.randrange(10 ** (n - 1) if n > 1 else 0, 10**n))


def _addition(rng: random.Random, n: int) -> Example:
    a, b = _number(rng, n), _number(rng, n)
    return [*a, "+", *b], list(str(int(a) + int(b)))


def _parity(rng: random.Random, n: int) -> Example:
    bits = [rng.choice("01") for _ in range(n)]
    return bits, [str(bits.count("1") % 2)]


def _sorting(rng: random.Random, n: int) -> Example:
    items = [rng.choice(DIGITS) for _ in range(n)]
    return items, sorted(items)


def _scan(rng: random.Random, n: int) -> Example:
    """A SCAN command denoting exactly ``n`` actions (rejection sampling from the grammar)."""
    if n not in scan.REACHABLE:
        raise OptionError(f"task scan: no command denotes {n} actions",
                          f"lengths some command reaches: {', '.join(map(str, sorted(scan.REACHABLE)))}")
    for _ in range(100_000):
        words, actions = scan.command(rng)
        if len(actions) == n:
            return words, actions
    raise OptionError(f"SCAN has no command of {n} actions within 100000 draws")


TASKS: dict[str, Task] = {t.name: t for t in (
    Task("copy", LETTERS, 20, 40, 1, _copy, "items", lambda n: 2 * n),
    Task("reverse", LETTERS, 20, 40, 1, _reverse, "items", lambda n: 2 * n),
    Task("addition", (*DIGITS, "+"), 8, 16, 1, _addition, "digits per addend", lambda n: 3 * n + 2),  # a+b, and a carry
    Task("parity", ("0", "1"), 8, 16, 1, _parity, "bits", lambda n: n + 1),
    Task("sorting", DIGITS, 8, 16, 1, _sorting, "items", lambda n: 2 * n),
    Task("scan", (*scan.COMMAND_WORDS, *scan.ACTIONS), 22, 48, 1, _scan, "actions", lambda n: n + scan.MAX_WORDS),
)}


def get_task(name: str) -> Task:
    """The task called ``name``, or a one-line error naming the tasks there are."""
    try:
        return TASKS[name]
    except KeyError:
        raise OptionError(f"unknown task {name!r}", f"one of {', '.join(TASKS)}") from None
