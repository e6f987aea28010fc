"""Toeplitzness against benchmark performance: the TISA paper's Figure 2.

:func:`plot_toeplitzness_vs_metric` draws one point per model (colour: ALBERT
size; open: v1, filled: v2; other markers: extra models), one arrow v1 -> v2 per
size, the null-baseline band on the Toeplitzness axis, and a footnote saying where
the values come from and which models are left out.

:func:`draw_trajectories` is the extension point for models that move during
training: each :class:`Trajectory` is a sequence of (Toeplitzness, metric) points
drawn as a path with an arrow at its end, on a second panel when passed to
:func:`plot_toeplitzness_vs_metric` (``posviz toeplitzness --plot-vs-glue --run``;
:func:`posviz.series.runs.run_trajectory` reads one from a training run).

:func:`draw_comparison` and :func:`draw_trajectory_panel` draw the two panels on
any Axes, so that other layouts (the PDF report's page) reuse them.

Artists carry ``gid`` values (``point:LABEL``, ``label:LABEL``, ``arrow:SIZE``,
``null-band``, ``trajectory:LABEL``) so that tests and callers can find the plotted
data.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING

from posviz.plots.common import keep_min_span, new_figure, short_label
from posviz.series.runs import Trajectory
from posviz.util.format import VARIANT_TEXT

if TYPE_CHECKING:
    from posviz.reference.albert import PerformanceComparison
    from posviz.series.downstream import DownstreamPath

#: Colour per ALBERT size (ColorBrewer Dark2, readable in grey scale too).
SIZE_COLORS: dict[str, str] = {"base": "#1b9e77", "large": "#d95f02", "xlarge": "#7570b3", "xxlarge": "#e7298a"}
#: Markers of extra models, in order.
EXTRA_MARKERS: tuple[str, ...] = ("*", "D", "P", "X", "^", "v", "s", "h")
_EXTRA_COLORS: tuple[str, ...] = ("#222222", "#1f78b4", "#a6761d", "#666666", "#e31a1c", "#33a02c", "#6a3d9a", "#b15928")
#: Narrowest Toeplitzness (R²) and score (percentage points) spans of a run panel: smaller moves stay small on it.
MIN_TOEPLITZ_SPAN, MIN_SCORE_SPAN = 0.05, 5.0


def draw_trajectories(ax, trajectories: Sequence[Trajectory], *, colors: Sequence[str] | None = None) -> list:
    """Draw each trajectory as a path: open marker at its start, arrow into its end.

    Parameters
    ----------
    ax
        Matplotlib Axes.
    trajectories
        Paths to draw.
    colors
        One colour per trajectory (default: the ``tab10`` cycle).

    Returns
    -------
    list
        The path artists (``Line2D``, gid ``trajectory:LABEL``), for a legend.
    """
    import matplotlib

    cycle = colors or [matplotlib.colormaps["tab10"](i % 10) for i in range(len(trajectories))]
    lines = []
    for t, color in zip(trajectories, cycle, strict=False):
        if not t.points:
            raise ValueError(f"trajectory {t.label!r} has no points")
        xs = [float(p[0]) for p in t.points]
        ys = [float(p[1]) for p in t.points]
        (line,) = ax.plot(xs, ys, "-", marker="o", ms=3, lw=1.3, color=color, label=t.label, gid=f"trajectory:{t.label}")
        ax.plot(xs[:1], ys[:1], "o", ms=6, mfc="white", mec=color, mew=1.5, gid=f"trajectory-start:{t.label}")
        if len(xs) > 1:
            ax.annotate("", xy=(xs[-1], ys[-1]), xytext=(xs[-2], ys[-2]), gid=f"trajectory-end:{t.label}",
                        arrowprops={"arrowstyle": "-|>", "color": color, "lw": 1.3, "mutation_scale": 12, "shrinkA": 0, "shrinkB": 2})
        lines.append(line)
    return lines


def footnote(cmp: PerformanceComparison, *, width: int = 130) -> str:
    """Where the plotted values come from and which models are left out, wrapped to ``width`` characters."""
    band = cmp.null_band()
    parts = []
    if (cmp.points["kind"] == "reference").any():
        parts.append("Benchmark values: google-research/albert README ('v2 vs v1' table, dev sets).")
    if (cmp.points["kind"] == "extra").any():
        parts.append("Extra models: values given by the user.")
    if band is not None:
        draws = cmp.settings.null_draws
        parts.append(f"Null band: R² of P for E_P with rows permuted (exact mean over all permutations; sd from {draws} seeded draws, seed {cmp.settings.seed}), mean ± 2 sd pooled over the {len(cmp.points)} models shown.")
    else:
        parts.append("No null baseline (null draws = 0).")
    lines = textwrap.wrap(" ".join(parts), width)
    if cmp.missing:
        why = f" ({cmp.missing_reason})" if cmp.missing_reason else ""
        lines += textwrap.wrap(f"NOT SHOWN — unavailable{why}: {', '.join(cmp.missing)}", width)
    return "\n".join(lines)


def downstream_note(paths: Sequence[DownstreamPath], *, width: int = 130) -> str:
    """What the downstream panel's values are, naming each run's tasks, wrapped to ``width`` characters."""
    runs = "; ".join(f"{short_label(p.run, 40)}: {', '.join(p.tasks)}" for p in paths)
    text = ("Fine-tuned runs: y = mean over the run's tasks of each task's median score over fine-tuning seeds "
            f"(posviz finetune), not comparable with the ALBERT average; x = the fine-tuned checkpoint's Toeplitzness, "
            f"from the run's log at that step (or computed from the checkpoint). Tasks: {runs}.")
    return "\n".join(textwrap.wrap(text, width))


def plot_toeplitzness_vs_metric(
    cmp: PerformanceComparison,
    *,
    trajectories: Sequence[Trajectory] | None = None,
    trajectory_ylabel: str | None = None,
    trajectory_xlabel: str | None = None,
    title: str | None = None,
    downstream: Sequence[DownstreamPath] | None = None,
):
    """Scatter of Toeplitzness (x) against a benchmark (y), arrows v1 -> v2 per size.

    Parameters
    ----------
    cmp
        Output of :func:`posviz.reference.albert.toeplitzness_vs_performance`.
    trajectories
        Optional paths (e.g. training runs) drawn on a panel of their own with
        :func:`draw_trajectory_panel`.
    trajectory_ylabel, trajectory_xlabel
        Axis labels of that panel (default: the comparison's metric; Toeplitzness of P).
        ``trajectory_xlabel`` also labels the downstream panel's x.
    title
        Figure title (default: says it is ALBERT v1 -> v2 and names the metric).
    downstream
        Fine-tuned runs (:func:`posviz.series.downstream.run_downstream`), drawn on a
        panel of their own beside the ALBERT panel with :func:`draw_downstream_panel`:
        their y (mean score over their own tasks) is not ALBERT's benchmark average.

    Returns
    -------
    matplotlib.figure.Figure
    """
    n = 1 + bool(downstream) + bool(trajectories)
    fig = new_figure(9.0 + 4.5 * (n - 1), 5.6)
    axes = list(fig.subplots(1, n, squeeze=False)[0])
    texts = draw_comparison(axes[0], cmp)
    if downstream:
        draw_downstream_panel(axes[1], downstream, xlabel=trajectory_xlabel)
    if trajectories:
        draw_trajectory_panel(axes[-1], trajectories, ylabel=trajectory_ylabel or cmp.metric.axis, xlabel=trajectory_xlabel)
    title = title or f"ALBERT v1 → v2: Toeplitzness of the position embeddings vs {cmp.metric.label}"
    if cmp.missing:  # said in the title whatever title was asked for
        title += f"\nINCOMPLETE: {len(cmp.missing)} model{'s' if len(cmp.missing) > 1 else ''} not shown (see the note below)"
    fig.suptitle(title, fontsize=11)
    note = footnote(cmp) + ("\n" + downstream_note(downstream) if downstream else "")
    fig.supxlabel(note, fontsize=7.5, color="0.25", x=0.01, ha="left")
    keep_labels_inside(fig, axes[0], texts)
    return fig


def draw_comparison(ax, cmp: PerformanceComparison, *, fontsize: float = 8) -> list:
    """Draw the ALBERT points, arrows, extra models, null band and legend on ``ax``.

    Parameters
    ----------
    ax
        Matplotlib Axes (the legend goes outside it, on the right).
    cmp
        The comparison to draw.
    fontsize
        Size of point labels and legend text.

    Returns
    -------
    list
        The point labels (annotations), for :func:`keep_labels_inside` once the
        figure's layout is final.
    """
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    pts = cmp.points
    xcol = "toeplitzness" + cmp.suffix
    handles: list = []

    band = cmp.null_band()
    if band is not None:
        m, s = band
        ax.axvspan(m - 2 * s, m + 2 * s, color="0.55", alpha=0.22, lw=0, gid="null-band")
        ax.axvline(m, color="0.4", lw=1.0, ls="--", gid="null-mean")
        handles.append(Patch(facecolor="0.55", alpha=0.35, label="null: rows of E_P permuted\n(mean ± 2 sd, dashed: mean)"))

    ref = pts[pts["kind"] == "reference"]
    for size in [s for s in SIZE_COLORS if s in set(ref["size"])]:
        handles.append(Line2D([], [], marker="o", ms=7, color=SIZE_COLORS[size], ls="none", label=f"ALBERT {size}"))
    if len(ref):
        handles.append(Line2D([], [], marker="o", ms=7, mfc="white", mec="0.3", mew=1.6, ls="none", label="v1 (open)"))
        handles.append(Line2D([], [], marker="o", ms=7, color="0.3", ls="none", label="v2 (filled)"))
    for a in cmp.arrows():
        color = SIZE_COLORS.get(a["size"], "0.3")
        ax.annotate("", xy=a["end"], xytext=a["start"], gid=f"arrow:{a['size']}",
                    arrowprops={"arrowstyle": "-|>", "color": color, "lw": 1.7, "mutation_scale": 15, "shrinkA": 5, "shrinkB": 6})
    if cmp.arrows():
        handles.append(Line2D([], [], color="0.3", lw=1.7, marker=">", ms=6, markevery=[1], label="v1 → v2"))

    n_extra = 0
    labels = []  # (x, y, text, (dx, dy) direction, color, gid)
    partner = {(a["size"], v): a["end" if v == "v1" else "start"] for a in cmp.arrows() for v in ("v1", "v2")}
    for _, p in pts.iterrows():
        x, y, label = float(p[xcol]), float(p["metric_value"]), str(p["label"])
        if p["kind"] == "reference":
            color = SIZE_COLORS.get(p["size"], "0.3")
            face = "white" if p["version"] == "v1" else color
            ax.plot([x], [y], ls="none", marker="o", ms=8, mfc=face, mec=color, mew=1.8, zorder=3, gid=f"point:{label}")
            labels.append((x, y, label, _outward(x, y, p["version"], partner.get((p["size"], p["version"]))), "0.15", f"label:{label}"))
        else:
            marker, color = EXTRA_MARKERS[n_extra % len(EXTRA_MARKERS)], _EXTRA_COLORS[n_extra % len(_EXTRA_COLORS)]
            n_extra += 1
            ax.plot([x], [y], ls="none", marker=marker, ms=11 if marker == "*" else 8, color=color, zorder=4, gid=f"point:{label}")
            labels.append((x, y, short_label(label, 30), (1, 1), color, f"label:{label}"))
            handles.append(Line2D([], [], marker=marker, ms=9, color=color, ls="none", label=short_label(label, 34)))

    if pts.empty:  # --allow-missing with none available: the other panel has the content
        ax.text(0.5, 0.5, "no checkpoint available\n(see the note below)", transform=ax.transAxes, ha="center",
                va="center", fontsize=10, color="0.35", gid="no-points")
        ax.set_xticks([])
        ax.set_yticks([])
    ax.margins(x=0.2, y=0.12)  # room for the point labels inside the axes
    texts = []
    for x, y, text, (dx, dy), color, gid in labels:
        texts.append(ax.annotate(text, (x, y), xytext=(7 * dx, 5 if dy > 0 else -12), textcoords="offset points",
                                 ha="left" if dx > 0 else "right", fontsize=fontsize, color=color, gid=gid))
    ax.set_xlabel("Toeplitzness of P = E_P E_Pᵀ (R² against its Toeplitz projection)")
    ax.set_ylabel(cmp.metric.axis)
    ax.grid(True, color="0.9", lw=0.8)
    ax.set_axisbelow(True)
    variant = VARIANT_TEXT[cmp.variant == "exclude_diagonal"]
    rows = cmp.settings.positions or "all"
    ax.set_title(f"Toeplitzness variant: {variant}; normalize={cmp.settings.normalize}; positions: {rows}", fontsize=9)
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0, fontsize=fontsize, frameon=False)
    return texts


def draw_trajectory_panel(ax, trajectories: Sequence[Trajectory], *, ylabel: str, xlabel: str | None = None, fontsize: float = 8) -> list:
    """A panel of trajectories (e.g. training runs) beside the ALBERT scatter.

    Parameters
    ----------
    ax
        Matplotlib Axes.
    trajectories
        Paths to draw (:func:`draw_trajectories`).
    ylabel, xlabel
        Axis labels (default x: Toeplitzness of P).
    fontsize
        Legend text size.

    Returns
    -------
    list
        The path artists.
    """
    lines = draw_trajectories(ax, list(trajectories))
    ax.set_xlabel(xlabel or "Toeplitzness of P")
    ax.set_ylabel(ylabel)
    ax.set_title("Trajectories (open circle: start)", fontsize=9)
    ax.grid(True, color="0.9", lw=0.8)
    ax.margins(x=0.1, y=0.1)
    keep_min_span(ax, x=MIN_TOEPLITZ_SPAN)
    ax.legend(handles=lines, fontsize=fontsize, frameon=False, loc="best")
    return lines


def _step_labels(paths: Sequence[DownstreamPath], near: tuple[float, float] = (0.15, 0.05)) -> dict[tuple[int, int], list[int]]:
    """``{(path index, step): steps}``: where to put a step label, and the steps it names.

    One or two paths get every step, more get each path's first and last. Labels that
    would overlap (within ``near``, fractions of the x and y spans the panel shows at the
    least) are thinned: of the same step on several paths one is kept (runs that end
    together get one ``step N``), and steps of one path share a label (``steps 10, 20``).
    """
    points = [xy for p in paths for xy in p.trajectory.points]
    spans = [max(max(v) - min(v), least) for v, least in zip(zip(*points, strict=True), (MIN_TOEPLITZ_SPAN, MIN_SCORE_SPAN), strict=True)]
    dx, dy = (f * span for f, span in zip(near, spans, strict=True))
    labels: dict[tuple[int, int], list[int]] = {}
    placed: list[tuple[int, int, float, float]] = []  # (path, step, x, y) of the labels kept
    for i, p in enumerate(paths):
        at = dict(zip(p.steps, p.trajectory.points, strict=True))
        shown = p.steps if len(paths) <= 2 else (p.steps[0], p.steps[-1])
        for step in sorted(dict.fromkeys(shown), key=lambda s: s not in (p.steps[0], p.steps[-1])):  # ends first
            x, y = at[step]
            close = [(j, s) for j, s, u, v in placed if abs(x - u) <= dx and abs(y - v) <= dy]
            if any(s == step for _, s in close):
                continue
            mine = next(((j, s) for j, s in close if j == i), None)
            if mine is not None:
                labels[mine].append(step)
            else:
                placed.append((i, step, x, y))
                labels[i, step] = [step]
    return labels


def draw_downstream_panel(ax, paths: Sequence[DownstreamPath], *, xlabel: str | None = None, fontsize: float = 8,
                          title: str = "Fine-tuned runs: each run's own tasks\n(not the ALBERT benchmark average)",
                          colors: Sequence[str] | None = None) -> list:
    """Fine-tuned runs: Toeplitzness of each fine-tuned checkpoint against its mean downstream score.

    One path per run through its checkpoints in step order (open circle: the earliest,
    arrow into the latest, like ALBERT's v1 → v2), each point labelled with its step (with more
    than two paths only the first and last; labels that would overlap are thinned or merged,
    :func:`_step_labels`).

    Parameters
    ----------
    ax
        Matplotlib Axes.
    paths
        The runs' points (:class:`~posviz.series.downstream.DownstreamPath`).
    xlabel
        x label (default: Toeplitzness of P); the same definition as the ALBERT panel's x.
    fontsize
        Legend and step-label text size.
    title
        Panel title.
    colors
        One colour per path (default: the trajectory colours in turn).

    Returns
    -------
    list
        The path artists (gid ``downstream:LABEL``).
    """
    from posviz.series.downstream import DOWNSTREAM_YLABEL

    lines = draw_trajectories(ax, [p.trajectory for p in paths], colors=colors)
    labels = _step_labels(paths)
    for i, (line, p) in enumerate(zip(lines, paths, strict=True)):
        line.set_gid(f"downstream:{p.trajectory.label}")
        for step, (x, y) in zip(p.steps, p.trajectory.points, strict=True):
            steps = sorted(labels.get((i, step), []))
            if steps:
                ax.annotate(f"step{'s' if len(steps) > 1 else ''} {', '.join(map(str, steps))}", (x, y), xytext=(5, 4),
                            textcoords="offset points", fontsize=fontsize - 1.5, color=line.get_color(),
                            gid=f"downstream-step:{p.trajectory.label}:{','.join(map(str, steps))}")
    ax.set_xlabel(xlabel or "Toeplitzness of P")
    ax.set_ylabel(DOWNSTREAM_YLABEL)
    ax.set_title(title, fontsize=9)
    ax.grid(True, color="0.9", lw=0.8)
    ax.margins(x=0.15, y=0.15)
    keep_min_span(ax, x=MIN_TOEPLITZ_SPAN, y=MIN_SCORE_SPAN)
    ax.legend(handles=lines, fontsize=fontsize, frameon=False, loc="best")
    return lines


def _outward(x: float, y: float, version: str, other: tuple[float, float] | None) -> tuple[int, int]:
    """Label direction pointing away from the other version of the same size.

    v1 and v2 labels then never sit on each other's marker, whichever way the arrow goes.
    """
    if other is None:
        return (1, -1) if version == "v1" else (1, 1)
    dx = 1 if x > other[0] or (x == other[0] and version == "v2") else -1
    dy = 1 if y > other[1] or (y == other[1] and version == "v2") else -1
    return dx, dy


def keep_labels_inside(fig, ax, texts) -> None:
    """Move a point label to the other side of its point when it would cross the axes edge."""
    fig.draw_without_rendering()  # runs the layout, so that extents are final
    renderer = fig.canvas.get_renderer()
    box = ax.bbox
    for t in texts:
        bb = t.get_window_extent(renderer)
        (ox, oy), ha = t.xyann, t.get_horizontalalignment()
        if bb.x1 > box.x1 or bb.x0 < box.x0:
            t.xyann, ha = (-ox, oy), ("right" if ha == "left" else "left")
            t.set_horizontalalignment(ha)
        if bb.y1 > box.y1 or bb.y0 < box.y0:
            t.xyann = (t.xyann[0], 5 if oy < 0 else -12)
