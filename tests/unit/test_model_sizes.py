"""Model sizes: the named ones and shapes LAYERSxWIDTH[xHEADS], with their default learning rates."""

from __future__ import annotations

import pytest

from posviz.models import SIZES, size_dimensions
from posviz.train.options import LEARNING_RATES, default_learning_rate


def test_a_named_size_is_its_table_entry_and_a_shape_follows_tiny_and_small():
    for name, dims in SIZES.items():
        assert size_dimensions(name) == dims
    # the shape rule (heads of 32 unless given, feed-forward 4x, embeddings half the width) reproduces tiny and small
    assert size_dimensions("4x128") == SIZES["tiny"]
    assert size_dimensions("6x256x4") == SIZES["small"]
    assert size_dimensions("6x256")["num_attention_heads"] == 8
    assert size_dimensions("2x64") == dict(embedding_size=32, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                                           intermediate_size=256)
    assert size_dimensions("1x48x3")["num_attention_heads"] == 3
    assert size_dimensions("2x16")["num_attention_heads"] == 1  # narrower than one head of 32: a single head


@pytest.mark.parametrize(("size", "fragment"), [
    ("huge", "unknown size 'huge'"), ("2x", "unknown size"), ("2x64x", "unknown size"), ("x64", "unknown size"),
    ("0x64", "1 to 48 layers"), ("49x64", "1 to 48 layers"), ("2x8", "width of 16 to 4096"),
    ("3x100", "3 heads do not divide a width of 100"), ("2x64x0", "0 heads"), ("2x64x128", "128 heads"),
])
def test_a_size_that_is_neither_is_refused_with_its_reason(size, fragment):
    with pytest.raises(ValueError, match=fragment):
        size_dimensions(size)


def test_a_shape_takes_the_learning_rate_of_the_first_named_size_at_least_as_wide():
    assert {name: default_learning_rate(name) for name in LEARNING_RATES} == LEARNING_RATES
    assert default_learning_rate("2x64") == LEARNING_RATES["tiny"]
    assert default_learning_rate("8x128") == LEARNING_RATES["tiny"]
    assert default_learning_rate("2x192") == LEARNING_RATES["small"]
    assert default_learning_rate("2x512") == LEARNING_RATES["base"]
    assert default_learning_rate("2x1024") == LEARNING_RATES["base"]  # wider than base: base's
