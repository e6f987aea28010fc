"""Step labels of the downstream panel: every step on one or two paths; ends only, once per spot, on more."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

from posviz.compare.downstream import DownstreamPath
from posviz.compare.trajectories import Trajectory
from posviz.plots.common import new_figure
from posviz.plots.scatter import draw_downstream_panel


def path(label: str, points: list[tuple[float, float]], steps=(500, 1000, 2000)) -> DownstreamPath:
    return DownstreamPath(trajectory=Trajectory(label, points), run=label, scheme="absolute", measure="ep", steps=tuple(steps),
                          tasks=("builtin/shuffled",), x_from=("log",) * len(steps), n_seeds=(3,) * len(steps))


def step_labels(paths: list[DownstreamPath]) -> set[str]:
    ax = new_figure(6, 4).subplots()
    draw_downstream_panel(ax, paths)
    return {t.get_gid() for t in ax.texts if (t.get_gid() or "").startswith("downstream-step:")}


def test_one_or_two_paths_label_every_step():
    a = path("a", [(0.1, 70.0), (0.3, 50.0), (0.35, 51.0)])
    b = path("b", [(0.2, 50.0), (0.5, 50.0), (0.6, 50.0)])
    assert step_labels([a, b]) == {f"downstream-step:{p}:{s}" for p in "ab" for s in (500, 1000, 2000)}


def test_many_paths_label_their_ends_once_per_spot():
    a = path("a", [(0.10, 72.0), (0.30, 50.0), (0.35, 51.0)])
    b = path("b", [(0.11, 71.0), (0.50, 50.0), (0.60, 50.0)])  # starts where a starts: its step 500 unlabelled
    c = path("c", [(0.60, 75.0), (0.55, 92.0), (0.57, 94.0)])
    d = path("d", [(0.62, 79.0), (0.54, 93.0), (0.58, 93.5)])  # ends where c ends (x within 15 %, y within 5 % of range)
    assert step_labels([a, b, c, d]) == {"downstream-step:a:500", "downstream-step:a:2000", "downstream-step:b:2000",
                                         "downstream-step:c:500", "downstream-step:c:2000", "downstream-step:d:500"}
