"""The verdicts of :mod:`posviz.series.integrity` on hand-made fingerprints: groups, naming, the threshold."""

from __future__ import annotations

import numpy as np

from posviz.series.integrity import SUSPECT_RATIO, Fingerprint, judge, relative_distance, summary_lines
from posviz.series.points import SeriesPoint


def _fp(step: int, vector, *, files=None, tensors=None, series="s", problem=None) -> Fingerprint:
    label = f"step{step}"
    v = None if vector is None else np.asarray(vector, dtype=float)
    return Fingerprint(SeriesPoint(f"org/x@{label}", series, step), label, "E_P", dict(files or {}),
                       tensors or (None if v is None else v.tobytes().hex()), v, problem)


def test_relative_distance():
    a, b = np.array([3.0, 4.0]), np.array([0.0, 0.0])
    assert relative_distance(a, a) == 0.0
    assert relative_distance(a, b) == 2.0  # ||a|| / ((5 + 0) / 2)
    assert relative_distance(b, b) == 0.0


def test_every_member_names_another_the_farthest():
    final = [9.0, 9.0]
    fps = [_fp(0, final), _fp(1, final), _fp(2, [1.0, 1.0]), _fp(3, [1.5, 1.5]), _fp(143, final)]
    v = judge(fps)
    assert [x.duplicate_of for x in v] == ["step143", "step143", None, None, "step0"]
    assert "143 steps away" in v[0].reason
    assert not any(x.suspect for x in v)


def test_same_file_other_tensors_bytes():
    fps = [_fp(1, [1.0], files={"model.safetensors": "aa"}), _fp(2, [2.0], files={"model.safetensors": "aa"}),
           _fp(3, [3.0], files={"model.safetensors": "bb"})]
    v = judge(fps)
    assert [x.duplicate_of for x in v] == ["step2", "step1", None]
    assert "same model.safetensors as step2" in v[0].reason


def test_discontinuity_threshold():
    t = np.array([1.0, 0.0])
    straight = [_fp(s, t * (10 + s)) for s in range(5)]
    assert not any(x.suspect for x in judge(straight))
    jump = straight[:2] + [_fp(2, t * 60)] + straight[3:]  # step 2 carries a far-away step's values
    v = judge(jump)
    assert [x.suspect for x in v] == [False, False, True, False, False]
    assert min(v[2].distance_prev, v[2].distance_next) > SUSPECT_RATIO * v[2].distance_neighbours
    assert v[0].distance_prev is None and v[4].distance_next is None  # the ends have one neighbour


def test_duplicates_leave_the_neighbour_chain_and_problems_are_reported():
    t = np.array([1.0, 0.0])
    fps = [_fp(0, t * 10), _fp(1, t * 50), _fp(2, t * 12), _fp(3, t * 50), _fp(4, t * 14), _fp(5, None, problem="offline")]
    v = judge(fps)
    assert [x.duplicate_of for x in v] == [None, "step3", None, "step1", None, None]
    assert not v[2].suspect and v[2].distance_prev is not None  # its neighbours are steps 0 and 4
    assert v[5].reason == "not checked: offline"
    lines = summary_lines({(fp.point.series, fp.point.step): x for fp, x in zip(fps, v, strict=True)},
                          {(fp.point.series, fp.point.step): fp.label for fp in fps})
    assert lines == ["2 of 6 checkpoints repeat another: step1 = step3, step3 = step1",
                     "1 of 6 checkpoints could not be checked for duplicates: step5"]
