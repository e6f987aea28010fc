"""The text tables the commands print (rich), each with a footnote stating its conventions.

Numbers are written by :mod:`posviz.util.format`, as in the PDF report.
"""

from __future__ import annotations

import io
from typing import Any

from posviz.toeplitz.headline import VARIANT_SHORT
from posviz.util.format import VARIANT_TEXT, mean_sd, score


def _null_text(draws: int, seed: int) -> str:
    from posviz.toeplitz.null import null_method_text

    return null_method_text(draws, seed) if draws else "not computed (--null-draws 0)"


def _headline_head(exclude_diagonal: bool) -> str:
    """The head of the headline column: ``Toeplitzness`` and, below, which R² it is."""
    return f"Toeplitzness\n{VARIANT_SHORT[exclude_diagonal]}"


def _export(console) -> str:
    """The recorded text, trailing spaces stripped, ending in one newline."""
    lines = [line.rstrip() for line in console.export_text().splitlines()]
    return "\n".join(lines).strip("\n") + "\n"


def scores_table(rows: list[dict], *, exclude_diagonal: bool, width: int | None = None) -> str:
    """``posviz toeplitzness``: one line per model (R² both variants, null, excess), with a footnote."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    suffix = "_offdiag" if exclude_diagonal else ""
    t = Table(box=box.SIMPLE_HEAD, header_style="bold")
    for col, justify in [("model", "left"), ("n×d", "right"), ("rows", "right"), (_headline_head(exclude_diagonal), "right"),
                         (VARIANT_SHORT[not exclude_diagonal], "right"), ("null (mean ± sd)", "right"), ("excess", "right")]:
        t.add_column(col, justify=justify)
    for r in rows:
        other = r["toeplitzness"] if exclude_diagonal else r["toeplitzness_offdiag"]
        t.add_row(
            r["model"],
            f"{r['positions']}×{r['dim']}",
            f"{r['rows'][0]}–{r['rows'][1] - 1}",
            score(r["toeplitzness" + suffix]),
            score(other),
            mean_sd(r["null_mean" + suffix], r["null_std" + suffix]),
            score(r["excess" + suffix], 3),
        )
    console = Console(width=width or 120, record=True, file=io.StringIO())
    console.print(t)
    r0 = rows[0]
    console.print(
        f"Toeplitzness = R² of P against its Toeplitz projection, variant: {VARIANT_TEXT[exclude_diagonal]}; "
        f"P = E Eᵀ, normalize={r0['normalize']}; null = {_null_text(r0['null_draws'], r0['seed'])}; "
        "excess = (R² − null)/(1 − null)."
    )
    return _export(console)


def comparison_table(cmp, *, width: int | None = None) -> str:
    """``--plot-vs-glue``: a :class:`~posviz.reference.albert.PerformanceComparison` as a table, with footnotes."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    sfx = cmp.suffix
    t = Table(box=box.SIMPLE_HEAD, header_style="bold")
    for col, justify in [("model", "left"), ("", "left"), (_headline_head(cmp.variant == "exclude_diagonal"), "right"), ("null (mean ± sd)", "right"),
                         ("excess", "right"), (cmp.metric.name, "right")]:
        t.add_column(col, justify=justify)
    for _, r in cmp.points.iterrows():
        t.add_row(
            str(r["model"]),
            str(r["label"]) if r["kind"] == "reference" else "extra (--score)",
            score(r["toeplitzness" + sfx]),
            mean_sd(r["null_mean" + sfx], r["null_std" + sfx]),
            score(r["excess" + sfx], 3),
            score(r["metric_value"], 2),
        )
    console = Console(width=width or 120, record=True, file=io.StringIO())
    console.print(t)
    st = cmp.settings
    console.print(
        f"Toeplitzness = R² of P = E Eᵀ against its Toeplitz projection, variant: {VARIANT_TEXT[cmp.variant == 'exclude_diagonal']}; "
        f"normalize={st.normalize}; null = {_null_text(st.null_draws, st.seed)}. {cmp.metric.name}: {cmp.metric.label}, "
        "ALBERT values from the google-research/albert README ('v2 vs v1' table)."
    )
    for line in cmp.arrow_lines():
        console.print(line)
    if cmp.missing:
        console.print(f"NOT SHOWN ({cmp.missing_reason}): {', '.join(cmp.missing)}")
    return _export(console)


def heads_table(rows: list[dict[str, Any]], layers: list[int], *, exclude_diagonal: bool, conventions: str) -> str:
    """``posviz heads``: per-head table (one layer) or layer x head matrix (several layers), with a footnote."""
    from rich.console import Console
    from rich.table import Table

    key = "toeplitzness_offdiag" if exclude_diagonal else "toeplitzness"
    other = "toeplitzness" if exclude_diagonal else "toeplitzness_offdiag"
    sfx = "_offdiag" if exclude_diagonal else ""
    t = Table(show_edge=False, header_style="bold")
    heads = sorted({r["head"] for r in rows})
    if len(layers) == 1:
        for col in ("head", _headline_head(exclude_diagonal), VARIANT_SHORT[not exclude_diagonal], "null", "excess", "peak k", "f̂(0)"):
            t.add_column(col, justify="right")
        for r in rows:
            null = score(r["null_mean" + sfx], negative_zero=True)
            if r.get("null_std" + sfx) == r.get("null_std" + sfx) and r.get("null_std" + sfx) is not None:
                null += f" ± {score(r['null_std' + sfx], negative_zero=True)}"
            t.add_row(str(r["head"]), score(r[key], negative_zero=True), score(r[other], negative_zero=True), null,
                      score(r["excess" + sfx], 3, negative_zero=True), str(r["peak_offset"]), f"{r['f_hat_0']:.4g}")
        width = 120
    else:
        t.add_column("layer", justify="right")
        for h in heads:
            t.add_column(f"h{h}", justify="right")
        t.add_column("mean", justify="right")
        by = {(r["layer"], r["head"]): r[key] for r in rows}
        for layer in layers:
            vals = [by[(layer, h)] for h in heads]
            t.add_row(str(layer), *[score(v, 3, negative_zero=True) for v in vals], score(sum(vals) / len(vals), 3, negative_zero=True))
        width = max(120, 8 * (len(heads) + 2))
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(t)
    console.print(_heads_footnote(rows, conventions, exclude_diagonal=exclude_diagonal, many_layers=len(layers) > 1), soft_wrap=False)
    text = console.export_text()
    return text if text.endswith("\n") else text + "\n"


def _heads_footnote(rows: list[dict[str, Any]], conventions: str, *, exclude_diagonal: bool, many_layers: bool) -> str:
    r0 = rows[0]
    what = "Toeplitzness R² per layer (rows) and head (columns)" if many_layers else "per-head Toeplitzness"
    lines = [
        f"{r0['model']}: {r0['scheme']}; {r0['positions']} positions.",
        f"{what}, variant {VARIANT_TEXT[exclude_diagonal]}; null: {r0['null_method']}"
        + ("; excess = (R² − null)/(1 − null)" if r0["null_mean"] == r0["null_mean"] else "")
        + ("." if many_layers else "; peak k = argmax of f̂(k), the mean of diagonal k = j − i, over |k| ≤ n/2."),
        f"Conventions: {conventions}.",
    ]
    return "\n".join(lines)


def rope_heads_table(rows: list[dict[str, Any]], *, conventions: str) -> str:
    """``posviz heads`` on a RoPE model: band usage and probe-profile summaries per head, with a footnote."""
    from rich.console import Console
    from rich.table import Table

    t = Table(show_edge=False, header_style="bold")
    layers = sorted({r["layer"] for r in rows})
    cols = (["layer"] if len(layers) > 1 else []) + ["head", "dominant band", "wavelength", "high-freq share",
                                                      "beyond-T share", "peak k", "locality", "w(k = −1)", "f(−1)"]
    for col in cols:
        t.add_column(col, justify="right")
    for r in rows:
        beyond = r.get("beyond_context_share")
        t.add_row(*([str(r["layer"])] if len(layers) > 1 else []), str(r["head"]), str(r["dominant_band"]),
                  f"{r['dominant_wavelength']:.4g}", f"{r['high_share']:.3f}", "—" if beyond is None else f"{beyond:.3f}",
                  str(r["peak_offset"]), str(r["locality"]), f"{r['weight_prev']:.3g}", f"{r['logit_prev']:.4g}")
    r0 = rows[0]
    console = Console(width=120, record=True, file=io.StringIO())
    console.print(t)
    console.print("\n".join([
        f"{r0['model']}: {r0['scheme']}; {len(r0['band_energy'])} bands; {r0['positions']} positions.",
        "Band energy E[h, b] = ||W_Q,h,b|| · ||W_K,g(h),b|| (norm gains folded in); dominant band = argmax_b E; "
        "high-freq share = share of E in bands b < (B − 1)/2 (band 0: θ = highest).",
        f"Beyond-T share = share of E in the bands whose wavelength 2π/θ_b (θ_b as applied, scaling included) exceeds "
        f"the trained context T: they never turn fully within it. {_context_footnote(rows)}.",
        f"Probe {r0['probe']}: f_h(k) = position-only logit of the probe's q and k, k = j − i ≤ 0; peak k = argmax; "
        "locality = width around the peak where f − mean(f) ≥ half its peak value; w(k = −1) = softmax weight of the "
        "previous token for the last query.",
        f"Conventions: {conventions}.",
    ]), soft_wrap=False, markup=False)
    return _export(console)


def _context_footnote(rows: list[dict[str, Any]]) -> str:
    """The context line of each distinct layer setting (Gemma 3's sliding-window layers have their own base)."""
    from posviz.extract.rope import context_text

    texts: dict[str, list[int]] = {}
    for r in rows:
        layers = texts.setdefault(context_text(r), [])
        if r["layer"] not in layers:
            layers.append(r["layer"])
    if len(texts) == 1:
        return next(iter(texts))
    return "; ".join(f"layer{'s' if len(ls) > 1 else ''} {', '.join(map(str, ls))}: {t}" for t, ls in texts.items())


def attention_table(rows: list[dict[str, Any]], *, conventions: str) -> str:
    """``posviz attention``: one line per (layer, head) with Toeplitzness, null, positional share, peak and sink."""
    from rich.console import Console
    from rich.table import Table

    t = Table(show_edge=False, header_style="bold")
    spans = bool(rows) and "span90" in rows[0]  # the tiled path's long-context statistics
    for col in ("layer", "head", "R² off-diag", "null", "R² full", "null", "pos. share", "null", "peak k", "sink",
                *(("span50", "span90") if spans else ())):
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(str(r["layer"]), str(r["head"]), *[score(r[k], negative_zero=True) for k in (
            "toeplitzness_offdiag", "null_mean_offdiag", "toeplitzness", "null_mean", "positional_share", "positional_share_null")],
            str(r["profile_peak"]), f"{r['sink_mass']:.3f}", *((f"{r['span50']:.1f}", f"{r['span90']:.1f}") if spans else ()))
    console = Console(width=120, record=True, file=io.StringIO())
    console.print(t)
    extra = ""
    if spans:
        rates = {r["layer"]: r["sink_rate"] for r in rows}
        extra = (f" span50/span90: mean distance |j - i| holding 50 %/90 % of a query's attention; sink rate (heads with "
                 f"sink > {rows[0]['sink_rate_eps']:g}): " + ", ".join(f"layer {k} {v:.0%}" for k, v in rates.items()) + ".")
    console.print(f"Toeplitzness of the mean attention over blocks; positional share: R² of every block's attention "
                  f"explained by the offset profile.{extra} {conventions}.", soft_wrap=False)
    return _export(console)


def hidden_table(rows: list[dict[str, Any]], *, conventions: str) -> str:
    """``posviz hidden``: one line per layer with positional share, Toeplitzness of P_l, rank and probes, each with its null."""
    from rich.console import Console
    from rich.table import Table

    t = Table(show_edge=False, header_style="bold")
    for col in ("layer", "pos. share", "null", "R² off-diag", "null", "R² full", "rank90", "stable rank",
                "probe MAE", "MAE middle", "order acc."):
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(str(r["layer"]), *[score(r[k], negative_zero=True) for k in (
            "positional_share", "positional_share_null", "toeplitzness_offdiag", "toeplitzness_null_offdiag", "toeplitzness")],
            str(r["rank90"]), f"{r['stable_rank']:.2f}", f"{r['probe_mae']:.2f}", f"{r['probe_mae_baseline']:.2f}",
            f"{r['probe_order_accuracy']:.3f}")
    console = Console(width=120, record=True, file=io.StringIO())
    console.print(t)
    console.print("Positional vectors V_l: mean hidden state at each position minus their mean; positional share: "
                  "between-position variance over total variance; R²: Toeplitzness of P_l = V_l V_lᵀ (null: rows of V_l "
                  "permuted); rank90: components holding 90 % of ‖V_l‖²; probe MAE: linear probe of the position on held-out "
                  f"blocks, in positions, against always predicting the middle; order acc.: which of two comes first (chance 0.5). "
                  f"{conventions}.", soft_wrap=False)
    return _export(console)


def extrapolate_table(result: Any) -> str:
    """``posviz extrapolate``: one line per model, variant and length (loss, perplexity, head means), with a footnote."""
    from rich.console import Console
    from rich.table import Table

    t = Table(show_edge=False, header_style="bold")
    for col in ("model", "variant", "length", "trained", "loss", "ppl", "tokens", "entropy", "norm. ent.", "max w.", "sink",
                "pos. share", "R² off-diag"):
        t.add_column(col, justify="left" if col in ("model", "variant") else "right")
    reasons: list[str] = []
    for r in result.runs:
        m = r.means()
        num = {k: "—" if v is None else f"{v:.3f}" for k, v in m.items()}
        if r.loss is None and r.reason and r.reason not in reasons:
            reasons.append(r.reason)
        mark = f" [{reasons.index(r.reason) + 1}]" if r.loss is None and r.reason else ""
        t.add_row(r.model, r.variant, str(r.length), "—" if r.training_length is None else str(r.training_length),
                  ("n/a" + mark) if r.loss is None else f"{r.loss:.4f}", "—" if r.perplexity is None else f"{r.perplexity:.2f}",
                  str(r.tokens), *(num[k] for k in ("entropy", "entropy_normalised", "max_weight", "sink_mass",
                                                    "positional_share", "toeplitzness_offdiag")))
    console = Console(width=max(140, 118 + max(len(r.model) + len(r.variant) for r in result.runs)), record=True,
                      file=io.StringIO())
    console.print(t)
    protocols = sorted({f"{r.model}: {r.protocol}; {r.layout}" for r in result.runs})
    lines = ["Loss: mean NLL per scored token (nats), ppl = exp(loss); trained: the training length. Then means over the "
             "measured heads of: attention entropy (nats), entropy / log(keys seen), largest weight, attention to position 0 "
             "(sink), positional share and off-diagonal Toeplitzness of the mean attention.",
             f"{result.conventions}.", *protocols, *(f"[{i + 1}] {why}" for i, why in enumerate(reasons))]
    console.print("\n".join(lines), soft_wrap=False, markup=False)
    return _export(console)


def task_table(result: Any) -> str:
    """``posviz extrapolate --task``: one line per model and length (exact match, accuracy, loss, head means), with a footnote."""
    from rich.console import Console
    from rich.table import Table

    t = Table(show_edge=False, header_style="bold")
    for col in ("model", "length", "trained", "tokens", "exact match", "token acc.", "loss", "norm. ent.", "sink", "pos. share"):
        t.add_column(col, justify="left" if col == "model" else "right")
    reasons: list[str] = []
    for r in result.runs:
        means = r.means()
        mean = {k: means[k] for k in ("entropy_normalised", "sink_mass", "positional_share")}
        if r.reason and r.reason not in reasons:
            reasons.append(r.reason)
        na = f"n/a [{reasons.index(r.reason) + 1}]" if r.reason else None
        t.add_row(r.model, str(r.length), "—" if r.train_length is None else str(r.train_length), str(r.positions),
                  na or f"{r.accuracy:.3f}", na or f"{r.token_accuracy:.3f}", na or f"{r.loss:.4f}",
                  *("—" if v is None else f"{v:.3f}" for v in mean.values()))
    console = Console(width=max(120, 90 + max(len(r.model) for r in result.runs)), record=True, file=io.StringIO())
    console.print(t)
    lines = ["length: the task's own (items, digits, actions); tokens: of the longest example ([BOS] question [SEP] answer "
             "[EOS]); exact match: share of answers entirely right; token acc. and loss (nats): the answer and [EOS]. Then "
             "means over the measured heads of: entropy / log(keys seen), attention to position 0 (sink), positional share.",
             f"{result.conventions}.", *(f"[{i + 1}] {why}" for i, why in enumerate(reasons))]
    console.print("\n".join(lines), soft_wrap=False, markup=False)
    return _export(console)
