"""Per-head section: each head's position-only attention, for every input with heads.

For each model or run: the head grid (maps, offset profiles f̂(k), Toeplitzness
against the exact permutation null) of the layers chosen with ``--layers``
(default: layer 0), and one page with the layer × head Toeplitzness matrix of
all layers. Relative-position models (T5, ALiBi, RoPE) appear here although they
have no P = E Eᵀ. The conventions (LayerNorm, biases, scale, rows kept) are
printed on every page.
"""

from __future__ import annotations

from posviz.report.context import ReportContext, ReportItem
from posviz.report.layout import Block, captioned_page
from posviz.report.section import Section
from posviz.report.sections.running import run_each

# Head maps are pooled to at most this many cells per side (a 16-head grid stays light).
HEAD_PIXELS = 128


def _spec(item: ReportItem) -> str | None:
    """What to open for an item: the model, or a run's final checkpoint (None: no heads)."""
    from posviz.read.embeddings import is_synthetic

    if is_synthetic(item.spec):  # controls are position tables only
        return None
    if item.kind == "run":
        run = item.data.get("run")
        return str(run.checkpoint) if run is not None and run.checkpoint is not None else None
    return item.spec


def build(ctx: ReportContext) -> list:
    """Pages for every input whose heads can be read (others get a title-page note)."""
    from posviz.extract.registry import open_heads
    pages = []
    opened = run_each(ctx, "Per-head maps", lambda spec: open_heads(spec, positions=ctx.options.positions, table=ctx.options.table),
                      spec_of=_spec)
    for item, heads in opened:
        pages += _pages(ctx, item, heads)
    return pages


def _pages(ctx: ReportContext, item: ReportItem, heads) -> list:
    from posviz.plots.common import short_label
    from posviz.scoring.layers import LayerTable, parse_layers, scan_layers

    meta = heads.metadata()
    shown = set(parse_layers(None, ctx.options.layers, heads.num_layers, item.label))
    label = short_label(item.label, 60)
    pages = []
    table = LayerTable(meta)
    for scored in scan_layers(heads, range(heads.num_layers), keep=shown):
        if scored.stack is not None:  # pages are drawn as the layers come, so one stack is held at a time
            pages.append(_layer_page(heads, item, label, meta["scheme"], scored))
            if "band_energy" in scored.conventions.get("per_head", {}):
                pages.append(_bands_page(item, label, meta, scored))
        table.add(scored)
    if heads.num_layers > 1:
        pages.append(_matrix_page(item, label, table, heads.num_heads))
    return pages


def _layer_page(heads, item: ReportItem, label: str, scheme: str, scored):
    """The head grid of one layer."""
    from posviz.plots.heads import HeadMapOptions, heads_scale_note, plot_heads
    from posviz.scoring.layers import first_position

    stack, layer, line = scored.stack, scored.layer, scored.convention_line
    page = captioned_page(
        f"{SECTION.title}: {label}, layer {layer}",
        f"{scheme}: {stack.heads} heads, {stack.n} positions; T = Toeplitzness, off-diagonal R²",
        f"{item.label}: layer {layer}",
        f"{item.label}: layer {layer}. Conventions: {line}; "
        + heads_scale_note(stack.n, min(stack.n, HEAD_PIXELS), robust=True, shared_scale=True),
    )
    options = HeadMapOptions(first_position=first_position(heads), causal=scored.causal, max_pixels=HEAD_PIXELS, raw_images=True)
    plot_heads(stack, scored.scores, conventions=line, options=options, fig=page)
    return page


def _bands_page(item: ReportItem, label: str, meta: dict, scored):
    """RoPE: the head x band energy heatmap, the probe profiles and the high-frequency shares of one layer."""
    from posviz.plots.rope_bands import plot_rope_bands
    from posviz.scoring.layers import LayerTable

    one = LayerTable(meta)
    one.add(scored)
    rows = one.rows()
    page = captioned_page(
        f"{SECTION.title}: {label}, layer {scored.layer}, RoPE bands",
        f"band energy of {len(rows)} heads over {len(rows[0]['band_energy'])} rotary bands; probe {rows[0]['probe']}",
        f"{item.label}: layer {scored.layer}, bands",
        f"{item.label}: layer {scored.layer}. E[h, b] = ||W_Q,h,b|| · ||W_K,g(h),b||, shown as each head's share; "
        f"dot: dominant band. {_context_sentence(rows)} Profiles f_h(k) of the probe {rows[0]['probe']} "
        f"({rows[0]['probe_input']}). Conventions: {scored.convention_line}",
    )
    plot_rope_bands(rows, scored.stack.offsets, title="", conventions="", fig=page)
    return page


def _context_sentence(rows: list[dict]) -> str:
    """The trained context, the bands beyond it (the dashed line) and the heads' energy share there."""
    from posviz.extract.rope import context_text

    shares = [r["beyond_context_share"] for r in rows if r.get("beyond_context_share") is not None]
    spread = f"; share of each head's band energy beyond T: {min(shares):.3f}–{max(shares):.3f}" if shares else ""
    return f"Dashed line: the first band beyond the trained context, {context_text(rows[0])}{spread}."


def _matrix_page(item: ReportItem, label: str, table, num_heads: int):
    """The layer x head Toeplitzness matrix of every layer."""
    from posviz.plots.heads import plot_layer_head_matrix

    n = len(table.layers)
    page = captioned_page(
        f"{SECTION.title}: {label}, all layers",
        f"Toeplitzness of every head ({n} layers × {num_heads} heads) and its excess over the null",
        f"{item.label}: layer × head",
        f"{item.label}: layer × head. Conventions: {table.convention_line}",
    )
    plot_layer_head_matrix(table.matrix("toeplitzness_offdiag"), layers=table.indices, title="", conventions="",
                           null_mean=table.matrix("null_mean_offdiag"), exclude_diagonal=True, fig=page)
    return page


def methods(ctx: ReportContext) -> list[Block]:
    """Definitions behind the per-head pages."""
    return [
        Block(
            "Per-head positional attention",
            (
                "For absolute-position models each head's position-only logits are A_h = (X W_Q^h + b_Q^h)(X W_K^h + b_K^h)ᵀ · s "
                "with X the kept rows of E_P passed through the LayerNorm the model applies before attention (the embedding "
                "LayerNorm of post-LN encoders, the layer's own input LayerNorm of pre-LN decoders), ALBERT's "
                "embedding_hidden_mapping_in applied first, biases included, and s = 1/√d_h (1 for GPT-Neo, which does not "
                "scale). Layers after the first receive E_P directly, an approximation stated on each page. Relative schemes "
                "give their own per-head matrix: T5's bucket bias, ALiBi's −m_h|j − i|, RoPE's probe profile "
                "f_h(k) = s · Re Σ_b q̄_b conj(k̄_b) e^{−ikθ_b} of the mean token embedding after the layer's input norm (with "
                "its band energy E[h, b] = ||W_Q,h,b|| · ||W_K,g(h),b|| on a page of its own), TISA's f(k), TUPE's untied "
                "positional term. Each head map is A_h with query position i down "
                "and key position j across; f̂(k) is the mean of A_h along offset k = j − i. The null of a head is the exact "
                "mean of its Toeplitzness over all row permutations of E_P (closed form), so it has no sampling noise. "
                "The TISA paper's Figure 8 shows such maps without saying how they were extracted: these conventions are "
                "posviz's own.",
            ),
        )
    ]


SECTION = Section("heads", "Per-head positional attention", build, methods, references=("wennberg2021",))
