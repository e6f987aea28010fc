"""`posviz toeplitzness --plot-vs-glue` on a fake offline HF cache of eight tiny ALBERTs.

The checkpoints (real ALBERTs with planted E_P whose Toeplitzness is computed
densely, independently of posviz) and the cache fixtures ``planted``,
``albert_cache`` and ``empty_albert_cache`` are shared with the report tests:
see ``tests/albert_planted.py`` and ``tests/conftest.py``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from posviz.cli.app import app
from posviz.plots.scatter import plot_toeplitzness_vs_metric
from tests.albert_planted import AVERAGE, RACE, SIZES, SQUAD1, WEIGHTS, D, N, hub_id
from tests.figures import by_gid

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args))


def _json_rows(result) -> list[dict]:
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert all("score_cache" not in r for r in rows)  # printed data does not depend on the cache state
    return rows


def _cache_hits(result) -> int:
    """How many scores the command says it read from the score cache (stderr note)."""
    m = re.search(r"(\d+) of (\d+) scores read from the posviz score cache", result.stderr)
    return int(m.group(1)) if m else 0


# ---------------------------------------------------------------------------
def test_printed_values_match_dense_reference(albert_cache, planted, tmp_path):
    fig = tmp_path / "albert.png"
    result = invoke("toeplitzness", "--plot-vs-glue", "-f", "json", "-o", str(fig), "--null-draws", "3")
    rows = _json_rows(result)
    assert fig.is_file() and _cache_hits(result) == 0
    assert [r["label"] for r in rows] == [f"{s} {v}" for s in SIZES for v in ("v1", "v2")]
    for r in rows:
        key = (r["size"], r["version"])
        assert r["model"] == hub_id(*key) and r["kind"] == "reference"
        assert r["toeplitzness"] == pytest.approx(planted[key].full, rel=1e-9, abs=1e-9)
        assert r["toeplitzness_offdiag"] == pytest.approx(planted[key].offdiag, rel=1e-9, abs=1e-9)
        assert r["metric"] == "average" and r["metric_value"] == AVERAGE[key]
        assert r["positions"] == N and r["dim"] == D and r["null_draws"] == 3


def test_table_output_lists_every_checkpoint_and_arrow(albert_cache, planted, tmp_path):
    r = invoke("toeplitzness", "--plot-vs-glue", "-o", str(tmp_path / "a.pdf"), "--null-draws", "2")
    assert r.exit_code == 0, r.output
    for key, p in planted.items():
        line = next(ln for ln in r.stdout.splitlines() if ln.strip().startswith(hub_id(*key) + " "))
        assert f"{p.offdiag:.4f}" in line and f"{AVERAGE[key]:.2f}" in line  # the headline, off-diagonal R²
    for size in SIZES:
        dx = planted[(size, "v2")].offdiag - planted[(size, "v1")].offdiag
        assert f"{size}: v1 → v2 Toeplitzness {dx:+.4f}" in r.stdout
    assert (tmp_path / "a.pdf").read_bytes().startswith(b"%PDF")


@pytest.mark.parametrize("metric", ["average", "mnli", "sst2", "squad1", "squad2", "race"])
def test_metric_column_chosen(albert_cache, metric):
    from posviz.reference.albert import toeplitzness_vs_performance
    from posviz.scoring.cache import ScoreSettings

    cmp = toeplitzness_vs_performance(metric=metric, settings=ScoreSettings(null_draws=0), progress_label=None)
    values = dict(zip(zip(cmp.points["size"], cmp.points["version"], strict=True), cmp.points["metric_value"], strict=True))
    if metric == "average":
        assert values == AVERAGE
    elif metric == "race":
        assert values == RACE
    elif metric == "squad1":
        assert values == pytest.approx({k: (f1 + em) / 2 for k, (f1, em) in SQUAD1.items()})
    else:  # every metric is a different column
        assert values != AVERAGE and values != RACE and len(set(values.values())) == 8
    assert metric in cmp.metric.name and cmp.metric.axis in plot_toeplitzness_vs_metric(cmp).axes[0].get_ylabel()


def test_cli_metric_option(albert_cache, tmp_path):
    rows = _json_rows(invoke("toeplitzness", "--plot-vs-glue", "--metric", "race", "-f", "json", "-o", str(tmp_path / "r.png"), "--null-draws", "0"))
    assert {(r["size"], r["version"]): r["metric_value"] for r in rows} == RACE


def test_arrows_point_from_v1_to_v2(albert_cache, planted):
    from posviz.reference.albert import toeplitzness_vs_performance
    from posviz.scoring.cache import ScoreSettings

    cmp = toeplitzness_vs_performance(settings=ScoreSettings(null_draws=2), exclude_diagonal=False, progress_label=None)
    fig = plot_toeplitzness_vs_metric(cmp)
    for size in SIZES:
        arrow = by_gid(fig, f"arrow:{size}")
        (x_tail, y_tail), (x_head, y_head) = arrow.xyann, arrow.xy
        v1, v2 = planted[(size, "v1")], planted[(size, "v2")]
        assert (x_tail, y_tail) == pytest.approx((v1.full, AVERAGE[(size, "v1")]), rel=1e-9, abs=1e-9)
        assert (x_head, y_head) == pytest.approx((v2.full, AVERAGE[(size, "v2")]), rel=1e-9, abs=1e-9)
        # Direction follows the planted data: xxlarge v2 was planted less Toeplitz than v1.
        assert (x_head > x_tail) is (WEIGHTS[(size, "v2")] > WEIGHTS[(size, "v1")])
        for version, p in (("v1", v1), ("v2", v2)):
            point = by_gid(fig, f"point:{size} {version}")
            assert point.get_xydata()[0] == pytest.approx((p.full, AVERAGE[(size, version)]))
            assert by_gid(fig, f"label:{size} {version}").get_text() == f"{size} {version}"
    assert {a["size"] for a in cmp.arrows()} == set(SIZES)


def test_the_offdiagonal_headline_is_plotted_by_default(albert_cache, planted):
    from posviz.reference.albert import toeplitzness_vs_performance
    from posviz.scoring.cache import ScoreSettings

    cmp = toeplitzness_vs_performance(settings=ScoreSettings(null_draws=0), progress_label=None)
    assert cmp.variant == "exclude_diagonal"
    fig = plot_toeplitzness_vs_metric(cmp)
    x = by_gid(fig, "point:base v2").get_xydata()[0][0]
    assert x == pytest.approx(planted[("base", "v2")].offdiag, rel=1e-9, abs=1e-9)
    assert "off-diagonal" in fig.axes[0].get_title()


def test_png_is_complete_and_nothing_is_clipped(albert_cache, tmp_path):
    from matplotlib.image import imread

    from posviz.plots.common import save_figure
    from posviz.plots.scatter import SIZE_COLORS
    from posviz.reference.albert import toeplitzness_vs_performance
    from posviz.scoring.cache import ScoreSettings

    cmp = toeplitzness_vs_performance(settings=ScoreSettings(null_draws=5), progress_label=None)
    fig = plot_toeplitzness_vs_metric(cmp)
    out = save_figure(fig, tmp_path / "fig.png", dpi=100)
    img = imread(out)
    width, height = fig.get_size_inches() * 100
    assert img.shape[:2] == (round(height), round(width))
    rgb = (img[..., :3] * 255).round().astype(int)
    assert (rgb.reshape(-1, 3) < 250).any(axis=1).mean() > 0.03  # not blank
    for color in SIZE_COLORS.values():  # every size's points were rendered
        want = np.array([int(color[i : i + 2], 16) for i in (1, 3, 5)])
        assert (np.abs(rgb - want).sum(axis=-1) <= 6).sum() > 20, color

    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    legend = ax.get_legend()
    labels = [t.get_text() for t in legend.get_texts()]
    assert [f"ALBERT {s}" for s in SIZES] == [t for t in labels if t.startswith("ALBERT")]
    assert "v1 → v2" in labels and any(t.startswith("null:") for t in labels)
    assert "ALBERT v1 → v2" in fig.get_suptitle() and "Average" in fig.get_suptitle()
    assert "off-diagonal" in ax.get_title() and "Toeplitzness" in ax.get_xlabel()
    # Everything drawn (ticks included) lies inside the canvas ...
    tight, canvas = fig.get_tightbbox(renderer), fig.bbox_inches
    assert tight.x0 >= canvas.x0 - 0.01 and tight.y0 >= canvas.y0 - 0.01
    assert tight.x1 <= canvas.x1 + 0.01 and tight.y1 <= canvas.y1 + 0.01
    # ... and so does every text that is not a tick label (titles, labels, legend, footnote).
    from matplotlib.text import Text

    ticks = {id(t) for a in fig.axes for t in a.get_xticklabels() + a.get_yticklabels()}
    texts = [t for t in fig.findobj(Text) if t.get_visible() and t.get_text() and id(t) not in ticks]
    assert len(texts) > 15
    box = fig.bbox
    for t in texts:
        bb = t.get_window_extent(renderer)
        assert bb.x0 >= box.x0 - 1 and bb.y0 >= box.y0 - 1 and bb.x1 <= box.x1 + 1 and bb.y1 <= box.y1 + 1, t.get_text()
    for key in WEIGHTS:  # point labels stay inside the axes too
        bb = by_gid(fig, f"label:{key[0]} {key[1]}").get_window_extent(renderer)
        assert ax.bbox.x0 <= bb.x0 and bb.x1 <= ax.bbox.x1 and ax.bbox.y0 <= bb.y0 and bb.y1 <= ax.bbox.y1, key


def test_null_band_pools_the_models_shown(albert_cache):
    from posviz.reference.albert import toeplitzness_vs_performance
    from posviz.scoring.cache import ScoreSettings

    cmp = toeplitzness_vs_performance(settings=ScoreSettings(null_draws=4), progress_label=None)
    means, stds = cmp.points["null_mean_offdiag"].to_numpy(), cmp.points["null_std_offdiag"].to_numpy()  # the headline's null
    m, s = cmp.null_band()
    assert m == pytest.approx(means.mean())
    assert s**2 == pytest.approx(np.mean(stds**2) + np.var(means))
    band = by_gid(plot_toeplitzness_vs_metric(cmp), "null-band")
    x0, x1 = band.get_x(), band.get_x() + band.get_width()  # a Rectangle in data x, axes y
    assert (x0, x1) == pytest.approx((m - 2 * s, m + 2 * s))


# ---- missing checkpoints ---------------------------------------------------
MISSING = [("large", "v2"), ("xxlarge", "v1"), ("xxlarge", "v2")]


def test_offline_missing_models_one_line_exit_2_no_figure(empty_albert_cache, planted, tmp_path, _isolated_score_cache):
    empty_albert_cache([k for k in planted if k not in MISSING])
    work = tmp_path / "work"
    work.mkdir()
    out = work / "fig.png"
    r = invoke("toeplitzness", "--plot-vs-glue", "-o", str(out))
    assert r.exit_code == 2
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in r.output
    m = re.search(r"HF_HUB_OFFLINE is set: (.*?) \(hint: (.*)\)$", lines[0])
    assert m, lines[0]
    assert m.group(1).split(", ") == [hub_id(*k) for k in MISSING]
    assert "--allow-missing" in m.group(2) and "online" in m.group(2)
    assert not out.exists() and list(work.iterdir()) == []
    assert not any(p.is_file() for p in _isolated_score_cache.rglob("*"))  # failed before scoring anything


def test_allow_missing_plots_the_rest_and_says_so(empty_albert_cache, planted, tmp_path):
    from posviz.reference.albert import toeplitzness_vs_performance
    from posviz.scoring.cache import ScoreSettings

    empty_albert_cache([k for k in planted if k not in MISSING])
    out = tmp_path / "fig.png"
    r = invoke("toeplitzness", "--plot-vs-glue", "--allow-missing", "-f", "json", "-o", str(out), "--null-draws", "2")
    rows = _json_rows(r)
    assert [(x["size"], x["version"]) for x in rows] == [k for k in WEIGHTS if k not in MISSING]
    assert out.is_file() and out.stat().st_size > 10_000

    cmp = toeplitzness_vs_performance(settings=ScoreSettings(null_draws=2), allow_missing=True, progress_label=None)
    assert cmp.missing == [hub_id(*k) for k in MISSING] and cmp.missing_reason == "HF_HUB_OFFLINE is set"
    fig = plot_toeplitzness_vs_metric(cmp)
    assert "INCOMPLETE: 3 models not shown" in fig.get_suptitle()
    footnote = fig._supxlabel.get_text().replace("\n", " ")
    assert all(hub_id(*k) in footnote for k in MISSING) and "NOT SHOWN" in footnote
    assert {a["size"] for a in cmp.arrows()} == {"base", "xlarge"}  # large and xxlarge lack a version
    assert not fig.findobj(lambda a: a.get_gid() == "arrow:large")


def test_nothing_available_even_with_allow_missing(empty_albert_cache, tmp_path):
    r = invoke("toeplitzness", "--plot-vs-glue", "-o", str(tmp_path / "f.png"))
    assert r.exit_code == 2 and "8 models are not in the local Hugging Face cache or the posviz score cache" in r.output
    assert "--allow-missing" not in r.output  # it would not help: nothing is available
    r = invoke("toeplitzness", "--plot-vs-glue", "--allow-missing", "-o", str(tmp_path / "f.png"))
    assert r.exit_code == 2 and "8 models are not in the local Hugging Face cache or the posviz score cache" in r.output and "--allow-missing" not in r.output
    assert not (tmp_path / "f.png").exists()


def test_allow_missing_with_no_albert_still_plots_the_runs(empty_albert_cache, absolute_run, tmp_path):
    """Offline with none of the eight: the runs' panel is drawn, the ALBERT panel says why it is empty."""
    out = tmp_path / "f.svg"
    r = invoke("toeplitzness", "--plot-vs-glue", "--run", str(absolute_run), "-o", str(out))
    assert r.exit_code == 2 and "8 models are not in the local Hugging Face cache" in r.output and not out.exists()
    r = invoke("toeplitzness", "--plot-vs-glue", "--allow-missing", "--run", str(absolute_run), "-o", str(out), "--null-draws", "0")
    assert r.exit_code == 0, r.output
    assert f"run {absolute_run} (absolute): Toeplitzness of E_P" in r.output
    text = out.read_text()
    assert 'id="no-points"' in text and f'id="trajectory:{absolute_run} (absolute)"' in text
    assert "INCOMPLETE: 8 models not shown" in text and "NOT SHOWN" in text  # title and footnote
    rows = _json_rows(invoke("toeplitzness", "--plot-vs-glue", "--allow-missing", "--run", str(absolute_run), "-f", "json",
                             "-o", str(tmp_path / "g.png"), "--null-draws", "0"))
    assert {x["kind"] for x in rows} == {"run"} and len(rows) == len(_evaluations(absolute_run))


def test_short_alias_in_the_hf_cache_is_found(empty_albert_cache, planted, tmp_path):
    empty_albert_cache([("base", "v2")], alias=True)
    empty_albert_cache([k for k in planted if k != ("base", "v2")])
    rows = _json_rows(invoke("toeplitzness", "--plot-vs-glue", "-f", "json", "-o", str(tmp_path / "f.png"), "--null-draws", "0"))
    row = next(r for r in rows if r["label"] == "base v2")
    assert row["model"] == "albert-base-v2" and row["toeplitzness"] == pytest.approx(planted[("base", "v2")].full, rel=1e-9, abs=1e-9)


def test_subset_of_albert_checkpoints(albert_cache, planted, tmp_path):
    rows = _json_rows(invoke("toeplitzness", "--plot-vs-glue", "albert-base-v1", "albert/albert-base-v2", "-f", "json",
                             "-o", str(tmp_path / "f.png"), "--null-draws", "0"))
    assert [r["label"] for r in rows] == ["base v1", "base v2"]


# ---- score cache -------------------------------------------------------------
def test_second_run_reads_the_score_cache_without_checkpoints(albert_cache, planted, tmp_path):
    args = ["toeplitzness", "--plot-vs-glue", "-f", "json", "-o", str(tmp_path / "f.png"), "--null-draws", "3"]
    r1 = invoke(*args)
    first = _json_rows(r1)
    assert _cache_hits(r1) == 0
    shutil.rmtree(albert_cache.cache_dir)  # no checkpoint left to open
    albert_cache.cache_dir.mkdir()
    r2 = invoke(*args)
    second = _json_rows(r2)
    assert "8 of 8 scores read from the posviz score cache" in r2.stderr
    assert r2.stdout == r1.stdout  # the same output, field order included
    assert [r["toeplitzness"] for r in second] == [r["toeplitzness"] for r in first]
    # Other settings are not in the score cache: the checkpoints would be needed.
    r = invoke("toeplitzness", "--plot-vs-glue", "-o", str(tmp_path / "g.png"), "--null-draws", "4")
    assert r.exit_code == 2 and "8 models are not in the local Hugging Face cache or the posviz score cache" in r.output
    r = invoke("toeplitzness", "--plot-vs-glue", "-o", str(tmp_path / "g.png"), "--null-draws", "3", "--no-cache")
    assert r.exit_code == 2 and not (tmp_path / "g.png").exists()


def test_new_commit_in_hf_cache_is_rescored(albert_cache, planted, tmp_path, hf_cache):
    args = ["toeplitzness", "--plot-vs-glue", "albert-base-v1", "-f", "json", "-o", str(tmp_path / "f.png"), "--null-draws", "0"]
    first = _json_rows(invoke(*args))[0]
    assert first["toeplitzness"] == pytest.approx(planted[("base", "v1")].full, rel=1e-9, abs=1e-9)
    # The Hub repo moved on: the same id now holds other weights (new commit in refs/main).
    new = planted[("xlarge", "v2")]
    hf_cache(hub_id("base", "v1"), new.folder)
    r = invoke(*args)
    second = _json_rows(r)[0]
    assert _cache_hits(r) == 0 and second["revision"] != first["revision"]
    assert second["toeplitzness"] == pytest.approx(new.full, rel=1e-9, abs=1e-9)


def _run(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "posviz", *args], capture_output=True, text=True, timeout=timeout, env=dict(os.environ))


def test_corrupt_cache_entry_is_recomputed_with_a_warning(albert_cache, planted, tmp_path, _isolated_score_cache):
    args = ["toeplitzness", "--plot-vs-glue", "albert-base-v1", "albert-base-v2", "-f", "json", "-o", str(tmp_path / "f.png"), "--null-draws", "2"]
    _json_rows(invoke(*args))
    entries = sorted(_isolated_score_cache.rglob("*.json"))
    assert len(entries) == 2
    victim = entries[0]
    victim.write_bytes(victim.read_bytes()[:100])  # as if the disk lost the end of the file
    r = _run(*args)
    assert r.returncode == 0, r.stderr
    warning = [ln for ln in r.stderr.splitlines() if ln.startswith("warning: ")]
    assert len(warning) == 1 and "ignoring score cache entry" in warning[0] and victim.name in warning[0]
    rows = json.loads(r.stdout)
    assert "1 of 2 scores read from the posviz score cache" in r.stderr
    for x in rows:
        assert x["toeplitzness"] == pytest.approx(planted[(x["size"], x["version"])].full, rel=1e-9, abs=1e-9)
    assert json.loads(victim.read_text())["magic"] == "posviz-score-cache"  # rewritten whole


def test_no_cache_reads_and_writes_nothing(albert_cache, tmp_path, _isolated_score_cache):
    args = ["toeplitzness", "--plot-vs-glue", "--no-cache", "-f", "json", "-o", str(tmp_path / "f.png"), "--null-draws", "0"]
    for _ in range(2):
        r = invoke(*args)
        assert len(_json_rows(r)) == 8 and _cache_hits(r) == 0
    assert not any(_isolated_score_cache.rglob("*"))


def test_plain_toeplitzness_uses_the_cache_for_local_folders(planted, tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(planted[("base", "v1")].folder, folder)
    args = ["toeplitzness", str(folder), "-f", "json", "--null-draws", "2"]
    r = invoke(*args)
    assert _cache_hits(r) == 0 and _json_rows(r)[0]["toeplitzness"] == pytest.approx(planted[("base", "v1")].full, rel=1e-9, abs=1e-9)
    miss = r.stdout
    r = invoke(*args)
    assert _cache_hits(r) == 1 and _json_rows(r)[0]["toeplitzness"] == pytest.approx(planted[("base", "v1")].full, rel=1e-9, abs=1e-9)
    assert r.stdout == miss
    r = invoke("toeplitzness", str(folder), "--null-draws", "2")
    assert "1 of 1 scores read from the posviz score cache" in r.stderr
    assert f"{planted[('base', 'v1')].full:.4f}" in r.stdout
    # Rewriting the checkpoint (other weights, same place) invalidates the entry.
    shutil.rmtree(folder)
    shutil.copytree(planted[("large", "v2")].folder, folder)
    r = invoke(*args)
    changed = _json_rows(r)[0]
    assert _cache_hits(r) == 0
    assert changed["toeplitzness"] == pytest.approx(planted[("large", "v2")].full, rel=1e-9, abs=1e-9)


def test_plain_toeplitzness_names_every_missing_model(empty_albert_cache, planted):
    empty_albert_cache([("base", "v1")])
    r = invoke("toeplitzness", hub_id("base", "v1"), "org/a", "org/b")
    assert r.exit_code == 2
    assert r.output.strip().startswith("error: 2 models are not in the local Hugging Face cache or the posviz score cache") and "org/a, org/b" in r.output
    assert "local path" in r.output
    r = invoke("toeplitzness", hub_id("base", "v1"), "org/a", "--allow-missing", "-f", "json", "--null-draws", "0")
    assert r.exit_code == 0 and [x["model"] for x in json.loads(r.stdout)] == [hub_id("base", "v1")]


# ---- extra models ------------------------------------------------------------
def test_extra_models_with_scores_share_the_axes(albert_cache, planted, tmp_path):
    from posviz.reference.albert import toeplitzness_vs_performance
    from posviz.scoring.cache import ScoreSettings

    extra = str(planted[("large", "v1")].folder)
    rows = _json_rows(invoke("toeplitzness", "--plot-vs-glue", extra, "--score", f"{extra}=83.25", "--score", "sinusoidal:512x128=79.5",
                             "-f", "json", "-o", str(tmp_path / "f.svg"), "--null-draws", "0"))
    assert len(rows) == 10
    by_model = {r["model"]: r for r in rows if r["kind"] == "extra"}
    assert by_model[extra]["metric_value"] == 83.25
    assert by_model[extra]["toeplitzness"] == pytest.approx(planted[("large", "v1")].full, rel=1e-9, abs=1e-9)
    assert by_model["sinusoidal:512x128"]["toeplitzness"] == pytest.approx(1.0)
    assert b"<svg" in (tmp_path / "f.svg").read_bytes()[:500]

    cmp = toeplitzness_vs_performance([extra], scores={extra: 83.25}, settings=ScoreSettings(null_draws=0), progress_label=None)
    fig = plot_toeplitzness_vs_metric(cmp)
    point = by_gid(fig, f"point:{extra}")
    assert point.get_marker() != "o" and point.get_xydata()[0] == pytest.approx((planted[("large", "v1")].offdiag, 83.25))
    assert any(extra[-20:] in t.get_text() for t in fig.axes[0].get_legend().get_texts())


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["./some-model"], "no average value for ./some-model"),
        (["--score", "albert-base-v2=80"], "comes from the bundled table"),
        (["--score", "x=abc"], "not a finite number"),
        (["--score", "x=nan"], "not a finite number"),
        (["--score", "novalue"], "not of the form MODEL=VALUE"),
        (["--metric", "bleu"], "Invalid value"),
        (["-o", "fig.txt"], "unknown output extension"),
    ],
)
def test_bad_plot_options_are_one_line_errors(albert_cache, tmp_path, monkeypatch, args, fragment):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    r = invoke("toeplitzness", "--plot-vs-glue", *args)
    assert r.exit_code == 2
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], r.output
    assert list(work.iterdir()) == []


def test_plot_options_need_plot_vs_glue():
    r = invoke("toeplitzness", "sinusoidal:32x8", "--metric", "race")
    assert r.exit_code == 2 and "--metric needs --plot-vs-glue" in r.output


# ---- hub download and the trajectory extension point ----------------------------
def test_download_reads_only_config_and_one_weight_file(planted, tmp_path, monkeypatch, online, _isolated_score_cache):
    from tests.hub_emulator import HubEmulator

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    served = {}
    for key in (("base", "v1"), ("base", "v2")):
        folder = tmp_path / "served" / key[1]
        shutil.copytree(planted[key].folder, folder)
        (folder / "pytorch_model.bin").write_bytes(b"not needed" * 1000)  # real repos hold other formats too
        (folder / "tf_model.h5").write_bytes(b"not needed" * 1000)
        served[key] = folder
    with HubEmulator() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        for key, folder in served.items():
            hub.add(hub_id(*key), folder)
        args = ["toeplitzness", "--plot-vs-glue", "albert-base-v1", "albert-base-v2", "-f", "json", "-o", str(tmp_path / "f.png"), "--null-draws", "0"]
        rows = _json_rows(invoke(*args))
        for key in served:
            assert sorted(set(hub.downloads(hub_id(*key)))) == ["config.json", "model.safetensors"]
        assert [r["toeplitzness"] for r in rows] == pytest.approx([planted[k].full for k in served], rel=1e-9, abs=1e-9)
        # Offline afterwards: served from the caches, no request made.
        n_requests = len(hub.requests)
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        r = invoke(*args)
        assert len(_json_rows(r)) == 2 and len(hub.requests) == n_requests and _cache_hits(r) == 2


def test_trajectories_go_on_a_second_panel(albert_cache):
    from posviz.reference.albert import toeplitzness_vs_performance
    from posviz.scoring.cache import ScoreSettings
    from posviz.series.runs import Trajectory

    cmp = toeplitzness_vs_performance(["albert-base-v1", "albert-base-v2"], settings=ScoreSettings(null_draws=0), progress_label=None)
    runs = [Trajectory("absolute", [(0.2, 60.0), (0.4, 64.0), (0.5, 66.0)]), Trajectory("tisa", [(0.9, 61.0), (0.95, 67.0)])]
    fig = plot_toeplitzness_vs_metric(cmp, trajectories=runs)
    assert len(fig.axes) == 2
    for t in runs:
        line = by_gid(fig, f"trajectory:{t.label}")
        assert line.axes is fig.axes[1]
        np.testing.assert_allclose(line.get_xydata(), np.array(t.points))
        end = by_gid(fig, f"trajectory-end:{t.label}")
        assert end.xy == t.points[-1] and end.xyann == t.points[-2]


def test_download_shows_a_progress_bar_on_a_terminal(planted, tmp_path, monkeypatch):
    """huggingface_hub draws its bar only on a terminal: give the process one as stderr."""
    pytest.importorskip("termios")  # POSIX terminals only
    import fcntl
    import pty
    import struct
    import termios
    import threading

    from tests.hub_emulator import HubEmulator

    with HubEmulator() as hub:
        hub.add(hub_id("base", "v2"), planted[("base", "v2")].folder)
        # TERM: the pty below is a terminal of its own kind, whatever the suite runs in (under TERM=dumb, as in an
        # editor's shell, the bar is not drawn)
        env = dict(os.environ, HF_HUB_CACHE=str(tmp_path / "hf"), HF_ENDPOINT=hub.endpoint, TERM="xterm")
        env.pop("HF_HUB_OFFLINE", None)
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # tqdm draws nothing 0 columns wide
        chunks: list[bytes] = []

        def drain() -> None:  # read the terminal while the process runs (its buffer is small)
            while True:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the process closed its end
                    return
                if not chunk:
                    return
                chunks.append(chunk)

        reader = threading.Thread(target=drain, daemon=True)
        reader.start()
        proc = subprocess.Popen([sys.executable, "-m", "posviz", "toeplitzness", "--plot-vs-glue", "albert-base-v2", "-f", "json",
                                 "-o", str(tmp_path / "f.png"), "--null-draws", "0"], stdout=subprocess.PIPE, stderr=slave, env=env)
        os.close(slave)
        out = proc.stdout.read()
        proc.wait(timeout=120)
        reader.join(timeout=120)  # it returns at the end of the terminal's output (EIO once the process has exited)
        assert not reader.is_alive()
        os.close(master)
        err = b"".join(chunks)
    assert proc.returncode == 0, err.decode(errors="replace")
    text = err.decode(errors="replace")
    assert "model.safetensors" in text and "100%" in text  # huggingface_hub's download bar
    assert json.loads(out)[0]["toeplitzness"] == pytest.approx(planted[("base", "v2")].full, rel=1e-9, abs=1e-9)


def test_pinned_revision_uses_only_a_score_of_that_revision(hf_cache, planted):
    commit = hf_cache("org/pinned", planted[("base", "v1")].folder)
    args = ["-f", "json", "--null-draws", "0"]
    first = _json_rows(invoke("toeplitzness", f"org/pinned@{commit}", *args))[0]
    assert first["revision"] == commit
    shutil.rmtree(hf_cache.cache_dir)
    hf_cache.cache_dir.mkdir()
    r = invoke("toeplitzness", f"org/pinned@{commit}", *args)
    assert _cache_hits(r) == 1 and _json_rows(r)[0]["toeplitzness"] == first["toeplitzness"]
    assert _cache_hits(r2 := invoke("toeplitzness", "org/pinned", *args)) == 1 and r2.exit_code == 0  # any revision
    r = invoke("toeplitzness", "org/pinned@" + "0" * 40, *args)  # another revision: not in the score cache
    assert r.exit_code == 2 and "not in the local Hugging Face cache or the posviz score cache" in r.output


# ---- training runs on the second panel (--run) -------------------------------------
def _evaluations(run) -> list[dict]:
    return json.loads((run / "trajectory.json").read_text())["evaluations"]


def test_run_trajectories_beside_the_albert_arrows(albert_cache, absolute_run, tisa_run, tmp_path):
    from posviz.reference.albert import toeplitzness_vs_performance
    from posviz.scoring.cache import ScoreSettings
    from posviz.series.runs import RUN_METRICS, run_trajectory

    svg = tmp_path / "f.svg"
    rows = _json_rows(invoke("toeplitzness", "--plot-vs-glue", "--run", str(absolute_run), "--run", str(tisa_run),
                             "-f", "json", "-o", str(svg), "--null-draws", "0"))
    assert [r["kind"] for r in rows] == ["reference"] * 8 + ["run"] * 6
    for run, measure in ((absolute_run, "toeplitzness_ep_offdiag"), (tisa_run, "toeplitzness_heads_offdiag_mean")):
        got = [(r["step"], r["toeplitzness"], r["metric_value"]) for r in rows if r["model"] == str(run)]
        ev = _evaluations(run)
        assert got == [(e["step"], pytest.approx(e[measure]), pytest.approx(100 * e["eval_accuracy"])) for e in ev]
        assert {r["measure"] for r in rows if r["model"] == str(run)} == {measure}
    text = svg.read_text()
    assert f'id="trajectory:{absolute_run} (absolute)"' in text and f'id="trajectory:{tisa_run} (tisa; mean head R²)"' in text

    # The same figure through the API: the runs' paths on their own panel, the ALBERT arrows on the first.
    paths = [run_trajectory(r) for r in (absolute_run, tisa_run)]
    cmp = toeplitzness_vs_performance(settings=ScoreSettings(null_draws=0), progress_label=None)
    fig = plot_toeplitzness_vs_metric(cmp, trajectories=[p.trajectory for p in paths], trajectory_ylabel=RUN_METRICS["accuracy"])
    ax_albert, ax_runs = fig.axes
    assert by_gid(fig, "arrow:base").axes is ax_albert
    ev = _evaluations(absolute_run)
    line = by_gid(fig, f"trajectory:{absolute_run} (absolute)")
    assert line.axes is ax_runs
    np.testing.assert_allclose(line.get_xydata(), [(e["toeplitzness_ep_offdiag"], 100 * e["eval_accuracy"]) for e in ev])
    end = by_gid(fig, f"trajectory-end:{absolute_run} (absolute)")
    assert end.xy == pytest.approx((ev[-1]["toeplitzness_ep_offdiag"], 100 * ev[-1]["eval_accuracy"]))
    tisa = by_gid(fig, f"trajectory:{tisa_run} (tisa; mean head R²)")
    np.testing.assert_allclose(tisa.get_xydata()[:, 0], [e["toeplitzness_heads_offdiag_mean"] for e in _evaluations(tisa_run)])
    # --full puts the full R² on the same axes
    full = run_trajectory(absolute_run, exclude_diagonal=False)
    assert [p[0] for p in full.trajectory.points] == pytest.approx([e["toeplitzness_ep"] for e in ev])
    legend = [t.get_text() for t in ax_runs.get_legend().get_texts()]
    assert legend == [f"{absolute_run} (absolute)", f"{tisa_run} (tisa; mean head R²)"]  # says which Toeplitzness
    assert ax_runs.get_ylabel() == "Held-out masked-token accuracy (%)"


def test_run_metric_loss_and_table_lines(albert_cache, absolute_run, tmp_path):
    r = invoke("toeplitzness", "--plot-vs-glue", "--run", str(absolute_run), "--run-metric", "loss", "-o", str(tmp_path / "f.png"),
               "--null-draws", "0")
    assert r.exit_code == 0, r.output
    ev = _evaluations(absolute_run)
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("run "))
    assert line == (f"run {absolute_run} (absolute): Toeplitzness of E_P (off-diagonal R²) {ev[0]['toeplitzness_ep_offdiag']:.4f} → "
                    f"{ev[-1]['toeplitzness_ep_offdiag']:.4f}, "
                    f"held-out loss {ev[0]['eval_loss']:.2f} → {ev[-1]['eval_loss']:.2f} (steps 0 → 12, 3 evaluations)")
    rows = _json_rows(invoke("toeplitzness", "--plot-vs-glue", "--run", str(absolute_run), "--run-metric", "loss", "-f", "json",
                             "-o", str(tmp_path / "g.png"), "--null-draws", "0"))
    assert [r["metric_value"] for r in rows if r["kind"] == "run"] == pytest.approx([e["eval_loss"] for e in ev])
    assert (tmp_path / "f.png").stat().st_size > 10_000


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["--run", "no-such-run"], "no-such-run: no such run folder"),
        (["--run", "."], "no trajectory.json"),
        (["--run-metric", "perplexity"], "Invalid value"),
    ],
)
def test_bad_run_options_are_one_line_errors(albert_cache, tmp_path, monkeypatch, args, fragment):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    r = invoke("toeplitzness", "--plot-vs-glue", "-o", "f.png", *args)
    assert r.exit_code == 2
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], r.output
    assert list(work.iterdir()) == []
    r = invoke("toeplitzness", "sinusoidal:32x8", "--run", ".")
    assert r.exit_code == 2 and "--run needs --plot-vs-glue" in r.output
