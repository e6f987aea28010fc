"""posviz's own measures, as the registry holds them (and as posviz's entry points in pyproject.toml name them).

Each part is a ``"module:attribute"`` string, imported only when that part is used.
"""

from __future__ import annotations

from posviz.measures.contract import Measure

_TRAJECTORY = "posviz.series.trajectory"
_VIEWS = "posviz.cli.trajectory"
_E_P = frozenset({"positions", "table", "normalize", "null_draws", "seed", "allow_missing", "cache"})
_TEXT = frozenset({"corpus", "seq_len", "max_blocks", "layers"})
_ON_TEXT = "posviz.measures.on_text"
_SECTIONS = "posviz.report.sections"
_TABS = "posviz.explorer.corpus"
#: The numbers of one model for ``attention`` (``posviz measure attention``, a report line): means over the chosen heads.
ATTENTION_COLUMNS = (("toeplitzness_offdiag", "Toeplitzness (off-diag.)"), ("excess_offdiag", "excess over null"),
                     ("positional_share", "positional share"), ("sink_mass", "sink mass"))
#: The numbers of one checkpoint for ``extrapolate`` (a point of a series): its loss at n, 2n and 4n positions.
EXTRAPOLATE_COLUMNS = (("loss_1x", "loss at n"), ("loss_2x", "loss at 2n"), ("loss_4x", "loss at 4n"),
                       ("growth_2x", "loss(2n) − loss(n)"))
#: The numbers of one model for ``hidden``: its last measured layer.
HIDDEN_COLUMNS = (("positional_share", "positional share"), ("toeplitzness_offdiag", "Toeplitzness (off-diag.)"),
                  ("probe_mae", "probe MAE"))

TOEPLITZNESS = Measure(
    "toeplitzness", "Toeplitzness of P = E_P E_Pᵀ (translation invariance of the position table), with its null",
    needs="weights", reads=("position table",), options=_E_P, series=f"{_TRAJECTORY}:toeplitzness_series",
    table=f"{_VIEWS}:toeplitzness_view", figure=f"{_VIEWS}:toeplitzness_figure", run="posviz.scoring.model:score_model",
    command="posviz toeplitzness", report=f"{_SECTIONS}.heatmaps:SECTION", explorer="posviz.explorer.weights:P_TAB")
BANDS = Measure(
    "bands", "RoPE band usage per head: the share of each head's query/key energy in the high-frequency bands",
    needs="weights", reads=("query/key weights",), options=frozenset({"layers", "probe", "positions"}),
    series=f"{_TRAJECTORY}:bands_series", table=f"{_VIEWS}:bands_view", figure=f"{_VIEWS}:bands_figure",
    command="posviz heads")
HEADS = Measure(
    "heads", "Per-head positional attention from the weights: position-only logits, offset profiles, Toeplitzness",
    needs="weights", reads=("position table", "query/key weights"), run="posviz:open_heads", command="posviz heads",
    report=f"{_SECTIONS}.heads:SECTION", explorer="posviz.explorer.weights:HEADS_TAB")
ATTENTION = Measure(
    "attention", "The attention a model produces on text: Toeplitzness, positional share, sink mass, entropy, span",
    needs="text", reads=("attention inputs",), options=_TEXT, series=f"{_TRAJECTORY}:attention_series",
    table=f"{_VIEWS}:attention_view", figure=f"{_VIEWS}:attention_figure", run="posviz.observe.attention:attention",
    command="posviz attention", accumulator="posviz.observe.tiled.sums:TiledSums", request=f"{_ON_TEXT}:attention_request",
    values=f"{_ON_TEXT}:attention_values", rows=f"{_ON_TEXT}:attention_rows", plot="posviz.cli.measure:attention_plot",
    columns=ATTENTION_COLUMNS, report=f"{_SECTIONS}.attention:SECTION", explorer=f"{_TABS}:ATTENTION_TAB")
HIDDEN = Measure(
    "hidden", "Position in the hidden states: positional share, Toeplitzness of V_l V_lᵀ, rank, a position probe",
    needs="text", reads=("hidden states",), options=_TEXT | {"seed"}, series=f"{_TRAJECTORY}:hidden_series",
    table=f"{_VIEWS}:hidden_view", figure=f"{_VIEWS}:hidden_figure", run="posviz.observe.hidden:hidden",
    command="posviz hidden", request=f"{_ON_TEXT}:hidden_request", values=f"{_ON_TEXT}:hidden_values",
    rows=f"{_ON_TEXT}:hidden_rows", plot="posviz.plots.hidden:plot_hidden", columns=HIDDEN_COLUMNS,
    report=f"{_SECTIONS}.hidden:SECTION", explorer=f"{_TABS}:HIDDEN_TAB")
EXTRAPOLATE = Measure(
    "extrapolate", "Loss and attention against length, past the trained length (and exact match on algorithmic tasks)",
    needs="text", reads=("attention inputs", "logits"), options=frozenset({"corpus", "seq_len", "max_blocks", "seed"}),
    point="posviz.measures.extrapolate_point:point", columns=EXTRAPOLATE_COLUMNS,
    run="posviz.extrapolation.extrapolate:extrapolate", command="posviz extrapolate", report=f"{_SECTIONS}.extrapolate:SECTION")

#: posviz's measures, in the order they are listed.
BUILT_IN = (TOEPLITZNESS, BANDS, HEADS, ATTENTION, HIDDEN, EXTRAPOLATE)
BUILT_IN_NAMES = tuple(m.name for m in BUILT_IN)
