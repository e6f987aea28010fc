"""``--train-fraction``'s subset of training blocks: its size, nesting and independence of the run seed."""

from __future__ import annotations

import numpy as np

from posviz.train.data import training_subset


def test_subset_sizes_are_rounded_up_and_never_empty():
    assert [len(training_subset(10, f)) for f in (1.0, 0.5, 0.25, 0.01)] == [10, 5, 3, 1]
    np.testing.assert_array_equal(training_subset(7, 1.0), np.arange(7))  # the whole set, in corpus order


def test_smaller_fractions_are_subsets_of_larger_ones_in_corpus_order():
    small, large = training_subset(1000, 0.1), training_subset(1000, 0.6)
    assert set(small) <= set(large)
    assert np.all(np.diff(large) > 0)
    assert large.min() < 100 and large.max() > 900  # spread over the corpus, not its first blocks
