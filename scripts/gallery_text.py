"""Comparing shipped text with a remake on another machine, and console examples of the docs with what posviz prints.

The float policy of ``scripts/gallery.py`` (its module docstring): printed floats are compared number by number
(:func:`numbers_agree`), words and integers exactly.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

#: The line that ends a console example's shown output early (the rest of the output is not shown).
_ELISION = ("...", "…")


@dataclass(frozen=True)
class ConsoleExample:
    """A console block of the docs whose one command runs offline here: ``posviz ...`` on the packaged MiniLM.

    Blocks on hub models, training runs or files of the reader's are illustrations; they are not run.
    """

    path: str
    start: int
    end: int
    command: str
    shown: str
    first: str  # the command line as the docs show it (with its HF_HUB_OFFLINE=1, if any)

    @property
    def label(self) -> str:
        return f"{self.path}: $ {self.command[:70]}"


def normal_lines(text: str) -> list[str]:
    """Lines without trailing blanks, and without the blank lines at the end."""
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


# --- comparing shipped text across machines (the float policy of the module docstring) ----------------------------

#: Two printed numbers agree when they differ by at most this, relative to the larger ...
REL_TOL = 1e-9
#: ... or by at most this (a value that is zero on one machine and 1e-17 on another)
ABS_TOL = 1e-12
_NUMBER = re.compile(r"([-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?)")


def _unit(token: str) -> tuple[float, int]:
    """One unit of the last digit ``token`` prints, and its format (digits after the point, exponent or not);
    unit 0 for a float printed in full (15 or more significant digits)."""
    mantissa, e, exponent = token.lower().lstrip("+-").partition("e")
    whole, _, decimals = mantissa.partition(".")
    shape = (len(decimals), bool(e))
    if len((whole + decimals).lstrip("0")) >= 15:
        return 0.0, shape
    return 10.0 ** (int(exponent or 0) - len(decimals)), shape


def numbers_agree(a: str, b: str, *, rounded: bool = True) -> bool:
    """Whether two printed numbers may be one computation's result on two machines.

    Integers (no point, no exponent) must be equal. Other numbers agree within ``REL_TOL`` relative or ``ABS_TOL``
    absolute. When ``rounded`` (text: a table's ``{:.4f}``) and both print the same number of decimals, short of full
    precision, they may also differ by one unit of that last digit: ``0.4742`` and ``0.4743`` can both be
    roundings of values within 1e-9 of each other; ``0.4742`` and ``0.4744`` cannot. JSON is written in full
    (shortest round-trip), so its numbers are compared with ``rounded=False``.
    """
    if a == b:
        return True
    integers = not any(c in t for t in (a, b) for c in ".eE")
    x, y = float(a), float(b)
    if integers or math.isnan(x) or math.isnan(y):
        return x == y
    (unit_a, shape_a), (unit_b, shape_b) = _unit(a), _unit(b)
    slack = unit_a if rounded and shape_a == shape_b and unit_a == unit_b else 0.0
    return abs(x - y) <= max(REL_TOL * max(abs(x), abs(y)), ABS_TOL) + slack


def lines_agree(a: str, b: str) -> bool:
    """Whether two lines of text are the same words and the same numbers (:func:`numbers_agree`)."""
    pa, pb = _NUMBER.split(a), _NUMBER.split(b)
    if len(pa) != len(pb):
        return False
    # re.split with a group alternates text (even indices) and numbers (odd indices)
    return all(x == y if i % 2 == 0 else numbers_agree(x, y) for i, (x, y) in enumerate(zip(pa, pb, strict=True)))


def text_differs(remade: str, shipped: str) -> str | None:
    """None when two texts agree line by line (:func:`lines_agree`); else the first difference."""
    new, old = normal_lines(remade), normal_lines(shipped)
    for i, (a, b) in enumerate(zip(new, old, strict=False)):
        if not lines_agree(a, b):
            return f"line {i + 1}: {a!r} != {b!r}"
    return None if len(new) == len(old) else f"{len(new)} lines != {len(old)} lines"


class _Printed(str):
    """A JSON number as it was printed (json.loads' parse_float), so that its printed precision is known."""


def json_differences(remade: str, shipped: str) -> list[str]:
    """Differences between two JSON documents: numbers by :func:`numbers_agree`, everything else exactly."""
    hook = {"parse_float": _Printed, "parse_int": _Printed, "parse_constant": _Printed}
    return _json_diff(json.loads(remade, **hook), json.loads(shipped, **hook), "")


def _json_diff(a: object, b: object, path: str) -> list[str]:
    if isinstance(a, _Printed) and isinstance(b, _Printed):
        return [] if numbers_agree(a, b, rounded=False) else [f"{path}: {a} != {b}"]
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return [f"{path}: keys {sorted(a.keys() ^ b.keys())}"]
        return [d for k in a for d in _json_diff(a[k], b[k], f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} != {len(b)} items"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in _json_diff(x, y, f"{path}[{i}]")]
    return [] if type(a) is type(b) and a == b else [f"{path}: {a!r} != {b!r}"]


def console_differs(example: ConsoleExample, printed: str) -> str | None:
    """None when ``printed`` is what the example shows (up to its elision line, ``...``); else the first difference.

    ``warning:`` lines that the example does not show are left out: they come from the installed libraries'
    releases (a deprecation in an older transformers), not from what the example documents.
    """
    shown = normal_lines(example.shown)
    # a library's own warning (a deprecation of the installed transformers, say) is not part of the example
    now = [line for line in normal_lines(printed) if not line.startswith("warning:") or line in shown]
    if shown and shown[-1].strip() in _ELISION:
        shown = shown[:-1]
        now = now[: len(shown)]
    for i, (a, b) in enumerate(zip(shown, now, strict=False)):
        if not lines_agree(a, b):
            return f"line {i + 2} shows\n    {a}\nbut posviz prints\n    {b}"
    if len(shown) != len(now):
        return f"the example shows {len(shown)} lines, posviz prints {len(now)}"
    return None


def refreshed(example: ConsoleExample, printed: str) -> str:
    """The example's block body with today's output (as long as before when it was elided)."""
    shown = example.shown.rstrip("\n").splitlines()
    lines = [line.rstrip() for line in printed.rstrip("\n").splitlines()]
    if shown and shown[-1].strip() in _ELISION:
        lines = lines[: len(shown) - 1] + [shown[-1]]
    return f"{example.first}\n" + "\n".join(lines) + "\n"
