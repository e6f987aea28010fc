"""TISA's Table 3 and the score along pre-training (posviz.finetuning.tables), checked against hand computations.

Records are written as ``posviz finetune`` writes them (:mod:`posviz.finetuning.results`):
per-seed records plus the median records of ``median_records``.
"""

from __future__ import annotations

import csv
import io
import math

import pytest

from posviz.finetuning.results import median_records
from posviz.finetuning.tables import AVERAGE, score_by_step, table3, table3_markdown
from posviz.reference import tisa_glue
from posviz.util.tables import to_csv


def records(source: str, step: int, task: str, values: list[float], metric: str = "score") -> list[dict]:
    """One record per fine-tuning seed plus the median record."""
    seeds = [{"source": source, "checkpoint": f"{source}/checkpoint-{step}", "step": step, "task": task, "seed": i,
              "metric": metric, "value": v} for i, v in enumerate(values)]
    return seeds + median_records(seeds)


def config(name: str, per_run: dict[int, dict[str, list[float]]], step: int = 100) -> list[dict]:
    """Records of one configuration: ``{pre-training seed: {task: fine-tuning values}}``."""
    return [r for seed, tasks in per_run.items() for task, vals in tasks.items() for r in records(f"runs/{name}-s{seed}", step, task, vals)]


ARMS = {"a": ["abs", "abs-s1", "abs-s3", "abs-s5"]}


def by(rows, task, arm="a"):
    return next(r for r in rows if r["task"] == task and r["arm"] == arm)


def test_nested_medians_odd_and_even_counts_delta_and_average():
    data = {
        # three pre-training seeds; their fine-tuning medians are 60 (odd count), 55 ((50+60)/2, even), 70
        "abs": config("abs", {0: {"t": [58, 60, 61], "u": [80]}, 1: {"t": [50, 60], "u": [70]}, 2: {"t": [70, 71, 69], "u": [90]}}),
        "abs-s1": config("abs-s1", {0: {"t": [62], "u": [81]}, 1: {"t": [64], "u": [85]}}),  # two seeds: median (62+64)/2
        "abs-s3": config("abs-s3", {0: {"t": [66, 61, 65], "u": [70]}}),
        # abs-s5 missing altogether
    }
    rows = table3(data, ARMS)
    t = by(rows, "t")
    assert t["baseline"] == 60 and (t["baseline min"], t["baseline max"], t["baseline n"]) == (55, 70, 3)
    assert t["S=1"] == 63 and (t["S=1 min"], t["S=1 max"], t["S=1 n"]) == (62, 64, 2)
    assert t["S=3"] == 65 and t["S=3 n"] == 1
    assert t["S=5"] is None and t["S=5 n"] == 0 and t["S=5 config"] == "abs-s5"
    assert t["best"] == "S=3" and t["delta"] == 5 and t["abs_delta"] == 5
    assert t["delta_pct"] == pytest.approx(100 * 5 / 40)
    u = by(rows, "u")
    assert u["baseline"] == 80 and u["S=1"] == 83 and u["S=3"] == 70 and u["best"] == "S=1"
    assert u["delta_pct"] == pytest.approx(100 * 3 / 20)
    # average: per run, the mean of its task medians; then the median over runs
    avg = by(rows, AVERAGE)
    assert avg["tasks"] == ["t", "u"]
    assert avg["baseline"] == pytest.approx(statistics_median([(60 + 80) / 2, (55 + 70) / 2, (70 + 90) / 2]))
    assert avg["S=1"] == pytest.approx(((62 + 81) / 2 + (64 + 85) / 2) / 2)
    assert avg["S=3"] == pytest.approx((65 + 70) / 2)
    assert [r["task"] for r in rows] == ["t", "u", AVERAGE]


def statistics_median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def test_pooled_aggregate_takes_every_value():
    data = {"abs": config("abs", {0: {"t": [58, 60, 61]}, 1: {"t": [50, 60]}, 2: {"t": [70, 71, 69]}}),
            "abs-s1": config("abs-s1", {0: {"t": [40, 100]}})}
    t = by(table3(data, ARMS, aggregate="pooled"), "t")
    assert t["baseline"] == 60.5 and (t["baseline min"], t["baseline max"]) == (50, 71)  # 50 58 60 60 | 61 69 70 71
    assert t["baseline n"] == 3 and t["S=1"] == 70
    assert t["delta"] == 9.5 and t["delta_pct"] == pytest.approx(100 * 9.5 / 39.5)


def test_worse_variant_gives_negative_error_reduction_and_missing_baseline_no_delta():
    data = {"abs": config("abs", {0: {"t": [90]}}), "abs-s1": config("abs-s1", {0: {"t": [88]}})}
    t = by(table3(data, ARMS), "t")
    assert t["delta"] == pytest.approx(-2) and t["abs_delta"] == pytest.approx(2) and t["delta_pct"] == pytest.approx(-20)
    t = by(table3({"abs-s3": config("abs-s3", {0: {"t": [88]}})}, ARMS), "t")
    assert t["baseline"] is None and t["S=3"] == 88 and t["delta"] is None and t["delta_pct"] is None
    assert table3({}, ARMS) == []


def test_last_step_of_each_run_unless_a_step_is_asked():
    data = {"abs": config("abs", {0: {"t": [10]}}, step=50) + config("abs", {0: {"t": [30]}}, step=100)
            + config("abs", {1: {"t": [20]}}, step=50)}  # seed 1 only fine-tuned at step 50
    assert by(table3(data, ARMS), "t")["baseline"] == 25  # seed 0 at its last step 100 (30), seed 1 at 50 (20)
    assert by(table3(data, ARMS, step=50), "t")["baseline"] == 15


def test_bad_arms_and_aggregate():
    with pytest.raises(ValueError, match="3 configurations for 4 columns"):
        table3({}, {"a": ["x", "y", "z"]})
    with pytest.raises(ValueError, match="aggregate"):
        table3({}, ARMS, aggregate="mean")


def test_the_papers_own_table3_deltas():
    """Each configuration of the paper is one 'run' with its reported median; |Δ| and Δ% as printed in the paper."""
    wide = tisa_glue(wide=True)
    data: dict[str, list[dict]] = {}
    for _, row in wide.iterrows():
        for col in wide.columns[1:]:
            if not math.isnan(row[col]):
                data.setdefault(col, []).extend(records(f"paper/{col}", 0, row["task"], [float(row[col])]))
    arms = {"a": ["a_baseline", "a_s1", "a_s3", "a_s5"], "b": ["b_baseline", "b_s1", "b_s3", "b_s5"]}
    rows = table3(data, arms, tasks=list(wide["task"]))
    # The paper's |Δ| and Δ% columns (Wennberg & Henter 2021, Table 3), rounded as printed.
    printed = {
        ("SST-2", "a"): (0.4, 5.6), ("MNLI", "a"): (1.0, 6.2), ("QQP", "a"): (0.1, 0.8), ("STS-B", "a"): (0.1, 1.0),
        ("CoLA", "a"): (1.3, 3.0), ("MRPC", "a"): (0.5, 4.8), ("QNLI", "a"): (0.1, 1.2), ("RTE", "a"): (0.7, 2.6),
        ("SST-2", "b"): (0.9, 6.0), ("MNLI", "b"): (2.8, 13.2), ("QQP", "b"): (0.5, 3.6), ("STS-B", "b"): (0.1, 0.9),
        ("MRPC", "b"): (0.5, 2.9), ("QNLI", "b"): (1.1, 8.2), ("RTE", "b"): (0.7, 1.8),
    }
    for (task, arm), (abs_delta, pct) in printed.items():
        r = by(rows, task, arm)
        assert round(r["abs_delta"], 1) == abs_delta and round(r["delta_pct"], 1) == pct, (task, arm, r)
    assert not any(r["task"] == "CoLA" and r["arm"] == "b" for r in rows)  # not reported without position embeddings
    assert by(rows, "MNLI", "b")["best"] == "S=5" and by(rows, "SST-2", "a")["best"] == "S=1"
    # the average row of (a): the mean over the eight tasks of each column
    assert by(rows, AVERAGE, "a")["baseline"] == pytest.approx(wide["a_baseline"].mean())

    md = table3_markdown(rows)
    lines = md.splitlines()
    assert lines[0].startswith(r"| task | (a) baseline | S=1 | S=3 | S=5 | \|Δ\| | Δ% | (b) baseline |")  # pipes escaped
    mnli = next(ln for ln in lines if ln.startswith("| MNLI |"))
    assert mnli == "| MNLI | 83.8 | 84.1 | 84.4 | 84.8 | 1.0 | 6.2% | 78.8 | 80.9 | 81.4 | 81.6 | 2.8 | 13.2% |"
    cola = next(ln for ln in lines if ln.startswith("| CoLA |"))
    assert cola.endswith("| 1.3 | 3.0% | – | – | – | – | – | – |")
    # CSV-ready: every row writes, the per-column fields in the header
    table = list(csv.DictReader(io.StringIO(to_csv(rows))))
    assert len(table) == len(rows) and float(table[0]["S=1"]) == 93.3 and table[0]["S=1 config"] == "a_s1"


def test_markdown_shows_the_seed_spread():
    data = {"abs": config("abs", {0: {"t": [60]}, 1: {"t": [55]}, 2: {"t": [70]}}), "abs-s1": config("abs-s1", {0: {"t": [61.25]}})}
    line = next(ln for ln in table3_markdown(table3(data, ARMS)).splitlines() if ln.startswith("| t |"))
    assert line == "| t | 60.0 (55.0–70.0) | 61.2 | – | – | 1.2 | 3.1% |"


def test_score_by_step_mean_and_spread_over_seeds():
    tupe = config("tupe", {0: {"t": [50, 52], "u": [70]}, 1: {"t": [54], "u": [80]}}, step=10) \
        + config("tupe", {0: {"t": [60], "u": [90]}, 1: {"t": [62], "u": [94]}}, step=20)
    absolute = config("abs", {0: {"t": [40], "u": [60], "v": [1]}}, step=10)  # v: not common, left out of the mean
    rows = score_by_step({"tupe-a": tupe, "absolute": absolute})
    assert [(r["config"], r["step"]) for r in rows] == [("tupe-a", 10), ("tupe-a", 20), ("absolute", 10)]
    first = rows[0]
    per_run = [(51 + 70) / 2, (54 + 80) / 2]
    assert first["mean"] == pytest.approx(sum(per_run) / 2) and first["min"] == min(per_run) and first["max"] == max(per_run)
    assert first["sd"] == pytest.approx(abs(per_run[0] - per_run[1]) / math.sqrt(2)) and first["n"] == 2
    assert first["tasks"] == ["t", "u"] and rows[2]["mean"] == 50 and rows[2]["sd"] == 0
    one = score_by_step({"tupe-a": tupe}, task="u")
    assert [r["mean"] for r in one] == [75, 92]
    with pytest.raises(ValueError, match="no task was fine-tuned at every step"):
        score_by_step({"x": config("x", {0: {"t": [1]}}), "y": config("y", {0: {"u": [1]}})})


def test_figures_plot_the_tabulated_values(tmp_path):
    from posviz.finetuning.results import results_path, write_document
    from posviz.finetuning.tables import load_configs
    from posviz.plots.finetune import plot_score_by_step, plot_table3

    # two runs of one configuration in run folders, read back through the results layout
    for seed, (v10, v20) in enumerate([(50.0, 60.0), (54.0, 66.0)]):
        run = tmp_path / f"tupe-s{seed}"
        for step, v in ((10, v10), (20, v20)):
            recs = records(str(run), step, "t", [v])
            write_document(results_path(run, "t", step), {"source": str(run), "step": step, "task": "t", "records": recs})
    data = load_configs({"tupe-a": [tmp_path / "tupe-s0", tmp_path / "tupe-s1"], "absolute": [tmp_path / "nothing-here"]})
    assert data["absolute"] == [] and len(data["tupe-a"]) == 8
    rows = score_by_step(data)
    fig = plot_score_by_step(rows)
    line = fig.findobj(lambda a: a.get_gid() == "by-step:tupe-a")[0]
    assert line.get_xydata().tolist() == [[10, 52.0], [20, 63.0]]
    line = plot_score_by_step(rows, colors={"tupe-a": "#d95f02"}).findobj(lambda a: a.get_gid() == "by-step:tupe-a")[0]
    assert line.get_color() == "#d95f02"  # a configuration's colour, as given

    arms = {"a": ["abs", "abs-s1", "abs-s3", "abs-s5"]}
    t3 = table3({"abs": config("abs", {0: {"t": [60]}, 1: {"t": [50]}}), "abs-s3": config("abs-s3", {0: {"t": [70]}})}, arms)
    fig = plot_table3(t3)
    point = fig.findobj(lambda a: a.get_gid() == "table3:t:a:baseline")[0]
    assert point.get_ydata().tolist() == [55.0]
    spread = fig.findobj(lambda a: a.get_gid() == "table3-spread:t:a:baseline")[0]
    assert [seg[:, 1].tolist() for seg in spread.get_segments()] == [[50.0, 60.0]]
    assert not fig.findobj(lambda a: a.get_gid() == "table3:t:a:S=1")  # no result: nothing drawn
    assert "|Δ| 15.0" in fig.axes[0].get_title()
