"""Training section: loss, accuracy and Toeplitzness over training, all runs on one figure.

Every ``posviz train`` run given to the report is one colour in four panels
(held-out and training loss, held-out masked-token accuracy, Toeplitzness of
P = E_P E_Pᵀ with its null baseline, mean Toeplitzness of the layer-0 heads'
positional scores, all against the training step; Toeplitzness is the headline
off-diagonal R², see :mod:`posviz.toeplitz.headline`, with the full R² faint), with a table of each run's
first and last evaluation below. The values are the run's own log
(:mod:`posviz.train.log`), not recomputed.
"""

from __future__ import annotations

from posviz.report.context import ReportContext
from posviz.report.layout import (
    BODY_SIZE,
    CONTENT_TOP,
    MARGIN_LEFT,
    MARGIN_RIGHT,
    SMALL_SIZE,
    Block,
    draw_table,
    new_page,
    wrap_label,
    wrap_text,
)
from posviz.report.section import Section
from posviz.util.format import first_last, score

FIRST_PAGE_ROWS = 6  # runs in the table under the figure; more go on continuation pages
MORE_PAGE_ROWS = 14
HEADER = (
    "run",
    "scheme",
    "steps",
    "held-out loss\nfirst → last",
    "accuracy (%)\nfirst → last",
    "E_P off-diag R²\nfirst → last",
    "its null\n(last)",
    "E_P full R²\nfirst → last",
    "head off-diag R²\nmean, first → last",
)
WIDTHS = (0.17, 0.08, 0.05, 0.11, 0.11, 0.14, 0.07, 0.12, 0.14)
ALIGN = ("left", "left", "right", "right", "right", "right", "right", "right", "right")


def row(item) -> list[str]:
    """The table cells of one run (first and last evaluation)."""
    run = item.data["run"]
    a, b = run.evaluations[0], run.evaluations[-1]
    return [
        wrap_label(item.label, 28),
        run.scheme,
        str(run.steps),
        first_last(a.get("eval_loss"), b.get("eval_loss"), 3),
        first_last(a.get("eval_accuracy"), b.get("eval_accuracy"), 2, 100.0),
        first_last(a.get("toeplitzness_ep_offdiag"), b.get("toeplitzness_ep_offdiag")),
        score(b.get("null_ep_offdiag")),
        first_last(a.get("toeplitzness_ep"), b.get("toeplitzness_ep")),
        first_last(a.get("toeplitzness_heads_offdiag_mean"), b.get("toeplitzness_heads_offdiag_mean")),
    ]


def build(ctx: ReportContext) -> list:
    """One page with the four panels and the runs' table (continued on further pages for many runs)."""
    runs = ctx.runs
    if not runs:
        return []
    sizes = sorted({r.data["run"].size for r in runs})
    fig = new_page(SECTION.title, f"{len(runs)} run{'s' if len(runs) != 1 else ''} of posviz train "
                   f"(size {', '.join(sizes)}): the runs' logs, one point per evaluation")
    _panels(fig, runs)
    rows = [row(it) for it in runs]
    width = MARGIN_RIGHT - MARGIN_LEFT
    bottom = draw_table(fig, (MARGIN_LEFT, 0.35, width), HEADER, rows[:FIRST_PAGE_ROWS], col_widths=WIDTHS, fontsize=BODY_SIZE - 1,
                        align=ALIGN)
    _note(fig, bottom - 0.02)
    pages = [fig]
    for start in range(FIRST_PAGE_ROWS, len(rows), MORE_PAGE_ROWS):
        more = new_page(f"{SECTION.title} (continued)", "first and last evaluation of each run")
        bottom = draw_table(more, (MARGIN_LEFT, CONTENT_TOP, width), HEADER, rows[start : start + MORE_PAGE_ROWS],
                            col_widths=WIDTHS, fontsize=BODY_SIZE - 1, align=ALIGN)
        _note(more, bottom - 0.02)
        pages.append(more)
    return pages


def _note(fig, top: float) -> None:
    """The table's footnote, wrapped to the page width."""
    text = ("accuracy: masked tokens of the fixed held-out set predicted exactly; Toeplitzness: off-diagonal R² (the headline: "
            "the full R² over all n² entries, beside it, is dominated by the Gram diagonal and can stay flat while translation "
            "invariance grows); null: exact mean over row permutations of E_P; mean head: over the layer-0 heads' positional "
            "scores; —: not defined for the scheme, or not logged by the run's posviz version.")
    lines = wrap_text(text, MARGIN_RIGHT - MARGIN_LEFT, SMALL_SIZE)
    fig.text(MARGIN_LEFT, top, "\n".join(lines), fontsize=SMALL_SIZE, va="top", color="0.25", linespacing=1.4)


def _panels(fig, runs) -> None:
    """Loss, accuracy, Toeplitzness of E_P and mean head Toeplitzness against the step, one colour per run."""
    import matplotlib
    from matplotlib.lines import Line2D

    colors = [matplotlib.colormaps["tab10"](i % 10) for i in range(len(runs))]
    n, gap = 4, 0.055
    width = (MARGIN_RIGHT - MARGIN_LEFT - gap * (n - 1) - 0.01) / n
    bottom, height = 0.5, CONTENT_TOP - 0.055 - 0.5
    axes = [fig.add_axes((MARGIN_LEFT + 0.01 + i * (width + gap), bottom, width, height)) for i in range(n)]
    loss, acc, ep, heads = axes
    any_ep = False
    for item, color in zip(runs, colors, strict=True):
        ev = item.data["run"].evaluations
        label = item.label

        def series(key, scale=1.0, ev=ev):
            pts = [(r["step"], r[key] * scale) for r in ev if r.get(key) is not None]
            return [p[0] for p in pts], [p[1] for p in pts]

        loss.plot(*series("eval_loss"), "-o", ms=2.5, lw=1.3, color=color, gid=f"eval_loss:{label}")
        loss.plot(*series("train_loss"), "--", lw=1.0, color=color, alpha=0.8, gid=f"train_loss:{label}")
        acc.plot(*series("eval_accuracy", 100.0), "-o", ms=2.5, lw=1.3, color=color, gid=f"eval_accuracy:{label}")
        xs, ys = series("toeplitzness_ep_offdiag")
        if xs:
            any_ep = True
            ep.plot(xs, ys, "-o", ms=2.5, lw=1.3, color=color, gid=f"toeplitzness_ep_offdiag:{label}")
            ep.plot(*series("null_ep_offdiag"), ":", lw=1.2, color=color, gid=f"null_ep_offdiag:{label}")
            ep.plot(*series("toeplitzness_ep"), "--", lw=0.8, color=color, alpha=0.45, gid=f"toeplitzness_ep:{label}")
        heads.plot(*series("toeplitzness_heads_offdiag_mean"), "-o", ms=2.5, lw=1.3, color=color,
                   gid=f"toeplitzness_heads_offdiag_mean:{label}")
        heads.plot(*series("toeplitzness_heads_mean"), "--", lw=0.8, color=color, alpha=0.45, gid=f"toeplitzness_heads_mean:{label}")
    objectives = {it.data["run"].options.get("objective", "mlm") for it in runs}
    # a causal run logs next-token loss and accuracy under the same keys: the titles say which the panels hold
    kind = {frozenset({"mlm"}): ("MLM", "masked-token"), frozenset({"causal"}): ("next-token", "next-token")}.get(
        frozenset(objectives), ("MLM or next-token", "masked- or next-token"))
    titles = (f"Held-out {kind[0]} loss\n(dashed: training loss)", f"Held-out {kind[1]}\naccuracy (%)",
              "Toeplitzness of P = E_P E_Pᵀ, off-diag R²\n(dotted: its null; faint dashed: full R²)",
              "Layer-0 heads' positional scores,\nmean off-diag R² (faint dashed: full)")
    for ax, title in zip(axes, titles, strict=True):
        ax.set_title(title, fontsize=BODY_SIZE - 1, loc="left")
        ax.set_xlabel("training step", fontsize=SMALL_SIZE + 0.5)
        ax.tick_params(labelsize=SMALL_SIZE)
        ax.grid(alpha=0.3, lw=0.5)
    if not any_ep:
        ep.text(0.5, 0.5, "no run has a position table\n(E_P): see the right panel", transform=ep.transAxes,
                ha="center", va="center", fontsize=SMALL_SIZE + 0.5, color="0.35")
        ep.set_xticks([])
        ep.set_yticks([])
    handles = [Line2D([], [], color=c, marker="o", ms=4, lw=1.3, label=f"{it.label} ({it.data['run'].scheme})")
               for it, c in zip(runs, colors, strict=True)]
    fig.legend(handles=handles, loc="upper left", bbox_to_anchor=(MARGIN_LEFT, bottom - 0.065), ncol=min(4, len(handles)),
               fontsize=SMALL_SIZE + 0.5, frameon=False, borderaxespad=0)


def methods(ctx: ReportContext) -> list[Block]:
    """What the training logs record, and the TISA and TUPE schemes."""
    schemes = sorted({it.data["run"].scheme for it in ctx.runs})
    causal = sorted(it.label for it in ctx.runs if it.data["run"].options.get("objective", "mlm") == "causal")
    blocks = [
        Block(
            "Training runs",
            (
                f"Runs of posviz train (schemes in this report: {', '.join(schemes)}): ALBERT-style masked-language "
                "models trained with Hugging Face's Trainer and DataCollatorForLanguageModeling (15% of tokens masked, "
                "80/10/10). At every evaluation the run logs the held-out MLM loss and masked-token accuracy, on a "
                "held-out split chosen and masked once with a fixed seed (every evaluation of every run scores the same "
                "tokens); the Toeplitzness of P = E_P E_Pᵀ with its row-permutation null (5 draws), for schemes with a "
                "position table; and the Toeplitzness of every layer-0 head's positional scores, the exact position-only "
                "term the model adds to its attention logits, with their mean. The report plots these logged values.",
                *([f"Causal runs ({', '.join(causal)}; posviz train --objective causal) are next-token language models "
                   "under a causal mask instead (DataCollatorForLanguageModeling with mlm=False): their logged loss and "
                   "accuracy are next-token ones, on the same held-out blocks."] if causal else []),
                "A run's rows in the summary table and its heatmap come from its final checkpoint, for schemes with a "
                "table: absolute and absolute+tisa (the input table E_P) and TUPE (the table of the untied positional "
                "term, without its extra [CLS] row).",
            ),
        ),
        Block(
            "TISA (Wennberg & Henter, 2021)",
            (
                "Translation-invariant self-attention adds to each head's attention logits a learned function of the "
                "offset alone, F[i, j] = f(j − i), so its positional scores are exactly Toeplitz (R² = 1):",
            ),
            (r"$f(k) = \Sigma_{s=1}^{S}\ a_s \exp(-|b_s| (k - c_s)^2), \quad k = j - i$",),
        ),
        Block(
            None,
            (
                "In words: f(k) = Σ a_s exp(−|b_s| (k − c_s)²) with k = j − i, key position minus query position; S "
                "kernels per head (3 parameters each), initialised c ~ N(0, 5), a ~ N(0.1, 0.01), b ~ N(0.1, 0.01). "
                "Scheme tisa has no position embeddings (the paper's variant b); absolute+tisa keeps E_P beside it "
                "(variant a). Kernels are shared across layers when the layers are shared.",
            ),
        ),
        Block(
            "TUPE (Ke, He & Liu, 2021)",
            (
                "Transformer with untied positional encoding: the input holds word embeddings only, and each head adds "
                "a positional term computed from the position table alone, LN(p_i) U_Q (LN(p_j) U_K)ᵀ, with U_Q, U_K "
                "biased per-head projections. Word and positional terms are both scaled by 1/√(2d), d the head size:",
            ),
            (r"$\alpha_{ij} = (x_i W_Q)(x_j W_K)^{\top} / \sqrt{2d} + (p_i U_Q)(p_j U_K)^{\top} / \sqrt{2d}$",),
        ),
        Block(
            None,
            (
                "The positional term is computed once per forward pass and shared by all layers. [CLS] is untied: row 0 "
                "and column 0 of the term are replaced by per-head values ([CLS] → others, others → [CLS]) from two extra "
                "position vectors. TUPE-R adds a per-head relative bias with T5 buckets (32 buckets, maximum distance "
                "128, bidirectional), shared across layers, with separate buckets for [CLS].",
            ),
        ),
    ]
    return blocks


SECTION = Section("training", "Training runs", build, methods, references=("wennberg2021", "ke2021"))
