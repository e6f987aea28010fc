"""The downstream panel: every step labelled on one or two paths, ends only (once per spot) on more; small moves stay small."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

from posviz.plots.common import new_figure
from posviz.plots.scatter import draw_downstream_panel
from posviz.series.downstream import DownstreamPath
from posviz.series.runs import Trajectory


def path(label: str, points: list[tuple[float, float]], steps=(500, 1000, 2000)) -> DownstreamPath:
    return DownstreamPath(trajectory=Trajectory(label, points), run=label, scheme="absolute", measure="ep", steps=tuple(steps),
                          tasks=("builtin/shuffled",), x_from=("log",) * len(steps), n_seeds=(3,) * len(steps))


def step_labels(paths: list[DownstreamPath]) -> set[str]:
    ax = new_figure(6, 4).subplots()
    draw_downstream_panel(ax, paths)
    return {t.get_gid() for t in ax.texts if (t.get_gid() or "").startswith("downstream-step:")}


def test_one_or_two_paths_label_every_step_sharing_a_label_where_they_would_overlap():
    a = path("a", [(0.1, 70.0), (0.3, 50.0), (0.35, 51.0)])  # 1000 and 2000 nearly on each other: one label for both
    b = path("b", [(0.2, 50.0), (0.5, 50.0), (0.6, 50.0)])
    assert step_labels([a, b]) == {"downstream-step:a:500", "downstream-step:a:1000,2000",
                                   *(f"downstream-step:b:{s}" for s in (500, 1000, 2000))}
    ax = new_figure(6, 4).subplots()
    draw_downstream_panel(ax, [a, b])
    assert sorted(t.get_text() for t in ax.texts if (t.get_gid() or "").startswith("downstream-step:a:")) == ["step 500", "steps 1000, 2000"]


def test_many_paths_label_their_ends_once_per_spot():
    a = path("a", [(0.10, 72.0), (0.30, 50.0), (0.35, 51.0)])
    b = path("b", [(0.11, 71.0), (0.50, 50.0), (0.60, 50.0)])  # starts where a starts: its step 500 unlabelled
    c = path("c", [(0.60, 75.0), (0.55, 92.0), (0.57, 94.0)])
    d = path("d", [(0.62, 79.0), (0.54, 93.0), (0.58, 93.5)])  # ends where c ends (x within 15 %, y within 5 % of range)
    assert step_labels([a, b, c, d]) == {"downstream-step:a:500", "downstream-step:a:2000", "downstream-step:b:2000",
                                         "downstream-step:c:500", "downstream-step:c:2000", "downstream-step:d:500"}


def limits(paths: list[DownstreamPath]) -> tuple[tuple[float, float], tuple[float, float]]:
    ax = new_figure(6, 4).subplots()
    draw_downstream_panel(ax, paths)
    return ax.get_xlim(), ax.get_ylim()


def test_a_tiny_move_is_not_stretched_across_the_panel():
    (x0, x1), (y0, y1) = limits([path("a", [(0.0667, 50.0), (0.0658, 50.4)], steps=(10, 20))])
    assert abs((x1 - x0) - 0.05) < 1e-12 and abs((y1 - y0) - 5.0) < 1e-12  # the narrowest spans, about the data
    assert x0 < 0.0658 and 0.0667 < x1 and y0 < 50.0 and 50.4 < y1
    assert step_labels([path("a", [(0.0667, 50.0), (0.0658, 50.1)], steps=(10, 20))]) == {"downstream-step:a:10,20"}
    (x0, x1), (y0, y1) = limits([path("b", [(0.1, 50.0), (0.6, 94.0)], steps=(10, 20))])
    assert x1 - x0 > 0.5 and y1 - y0 > 44  # wide moves keep matplotlib's own limits
