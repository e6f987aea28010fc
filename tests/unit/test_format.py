"""util/format.py: how every table writes a score."""

from __future__ import annotations

import math

import pytest

from posviz.util.format import MISSING, VARIANT_TEXT, change, first_last, is_missing, mean_sd, score


@pytest.mark.parametrize(("x", "digits", "text"), [
    (0.123456, 4, "0.1235"),
    (1.0, 4, "1.0000"),
    (-0.00004, 4, "0.0000"),  # a negative value that rounds to zero loses its sign
    (-0.25, 3, "-0.250"),
    (83.25, 2, "83.25"),
    (None, 4, MISSING),
    (math.nan, 3, MISSING),
])
def test_score(x, digits, text):
    assert score(x, digits) == text


def test_negative_zero_is_kept_on_request():
    assert score(-0.0003, 3, negative_zero=True) == "-0.000"
    assert score(0.0003, 3, negative_zero=True) == "0.000"
    assert score(math.nan, negative_zero=True) == MISSING


def test_compound_cells():
    assert mean_sd(0.18923, 0.00021) == "0.1892 ± 0.0002"
    assert mean_sd(math.nan, None) == f"{MISSING} ± {MISSING}"
    assert first_last(0.0035, 0.0453, 2, 100.0) == "0.35 → 4.53"
    assert first_last(None, 0.5) == f"{MISSING} → 0.5000"
    assert first_last(None, None) == MISSING
    assert change(0.30281, 4) == "+0.3028" and change(-0.1, 2) == "-0.10"
    assert is_missing(None) and is_missing(math.nan) and not is_missing(0.0)
    assert VARIANT_TEXT[True].startswith("off-diagonal") and VARIANT_TEXT[False].startswith("full")
