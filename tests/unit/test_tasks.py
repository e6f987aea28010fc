"""The algorithmic tasks: every answer recomputed independently, lengths as each task counts them, splits seeded and
hashed (and pinned, so that a platform or Python version that drew other examples would fail here), bad input."""

from __future__ import annotations

import hashlib

import pytest

from posviz.errors import OptionError
from posviz.tasks import TASKS, make_split, task_vocabulary
from posviz.tasks import scan as scan_grammar


def _answer(task: str, question: list[str]) -> list[str]:
    """The answer of a question, computed here without the generators."""
    if task == "copy":
        return question
    if task == "reverse":
        return question[::-1]
    if task == "addition":
        k = question.index("+")
        return list(str(int("".join(question[:k])) + int("".join(question[k + 1 :]))))
    if task == "parity":
        return [str(sum(int(b) for b in question) % 2)]
    if task == "sorting":
        return sorted(question)
    return scan_grammar.interpret(question)


def _length(task: str, question: list[str], answer: list[str]) -> int:
    """The task's own length of an example."""
    if task == "addition":
        k = question.index("+")
        assert len(question) == 2 * k + 1, "two addends of one length"
        return k
    return len(answer) if task == "scan" else len(question)


@pytest.mark.parametrize("task", sorted(TASKS))
def test_answers_and_lengths(task):
    spec = TASKS[task]
    lengths = [n for n in (1, 2, 5, spec.train_length, spec.test_length) if task != "scan" or n in scan_grammar.REACHABLE]
    split = make_split(task, lengths, 40, seed=3)
    for n, examples in split.examples.items():
        assert len(examples) == 40
        for question, answer in examples:
            assert answer == _answer(task, question)
            assert _length(task, question, answer) == n
            assert set(question) | set(answer) <= set(spec.symbols)
            assert len(question) + len(answer) <= spec.span(n)


def test_addition_addends_have_exactly_their_digits_and_carries_happen():
    split = make_split("addition", [6], 200, seed=0)
    for question, _ in split.examples[6]:
        assert question[0] != "0" and question[7] != "0"
    assert any(len(answer) == 7 for _, answer in split.examples[6]), "a carry out of the top digit"


def test_splits_are_reproducible_hashed_and_independent_per_length():
    a = make_split("copy", [5, 10], 8, seed=1)
    b = make_split("copy", [10, 5, 5], 8, seed=1)
    assert a.examples == b.examples and a.sha256 == b.sha256
    assert a.sha256 == hashlib.sha256(a.canonical()).hexdigest()
    assert make_split("copy", [5, 10], 8, seed=2).sha256 != a.sha256
    assert make_split("copy", [5, 10], 8, seed=1, purpose="test").sha256 != a.sha256
    assert make_split("copy", [5, 10, 20], 8, seed=1).examples[10] == a.examples[10]  # adding a length moves no other
    assert a.identity()["sha256"] == a.sha256 and a.identity()["lengths"] == [5, 10]


def test_a_split_is_the_same_everywhere():
    """Pinned: string seeds make ``random.Random`` draw the same examples on every platform and Python version."""
    split = make_split("copy", [5], 3, seed=0)
    assert split.examples[5][0][0] == ["o", "c", "a", "o", "n"]
    assert split.sha256 == "8c0119e29a238cf57a2f3a7c80c14eb884bc6504df0f08f05a571023f07806d7"


def test_encode_marks_where_the_answer_starts():
    vocab = task_vocabulary("reverse")
    assert list(vocab)[:5] == ["[PAD]", "[BOS]", "[SEP]", "[EOS]", "[UNK]"] and len(vocab) == 5 + 16
    split = make_split("reverse", [4], 2, seed=0)
    (ids, start), _ = split.encode(4)
    question, answer = split.examples[4][0]
    back = {i: s for s, i in vocab.items()}
    assert [back[i] for i in ids] == ["[BOS]", *question, "[SEP]", *answer, "[EOS]"] and start == len(question) + 2


def test_span_is_reached():
    """The bound of question plus answer is tight where the task can reach it (a carry; SCAN's longest commands)."""
    for task in TASKS:
        split = make_split(task, [8], 3000, seed=0)
        assert max(len(q) + len(a) for q, a in split.examples[8]) == TASKS[task].span(8), task


def test_scan_lengths_are_exactly_those_some_command_reaches():
    assert 23 not in scan_grammar.REACHABLE and {22, 24, 48} <= scan_grammar.REACHABLE
    assert max(scan_grammar.REACHABLE) == scan_grammar.MAX_ACTIONS == 48
    assert [len(make_split("scan", [n], 1, seed=0).examples[n][0][1]) for n in (22, 24, 48)] == [22, 24, 48]


@pytest.mark.parametrize(("args", "says"), [(("sums", [3], 2), "unknown task 'sums'"), (("scan", [23], 2), "no command denotes 23"),
                                            (("copy", [0], 2), "below its shortest"), (("copy", [3], 0), "at least 1")])
def test_bad_input_is_one_clear_error(args, says):
    with pytest.raises(OptionError, match=says):
        make_split(*args)
