"""The headline variant (off-diagonal R²): the evidence behind it, and that every output puts it first."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from posviz.cli.app import app
from posviz.toeplitz.headline import HEADLINE_EXCLUDE_DIAGONAL, field_suffix, headline_field, variant_name

runner = CliRunner()


def dense_r2(p: np.ndarray, *, exclude_diagonal: bool) -> float:
    """R² of P against its Toeplitz projection, from the definition (numpy, n x n)."""
    n = p.shape[0]
    i, j = np.indices(p.shape)
    k = j - i
    keep = k != 0 if exclude_diagonal else np.ones_like(k, dtype=bool)
    proj = np.zeros_like(p)
    for off in range(-(n - 1), n):
        m = k == off
        proj[m] = p[m].mean()
    v = p[keep]
    return 1.0 - ((v - proj[keep]) ** 2).sum() / ((v - v.mean()) ** 2).sum()


def test_headline_names():
    assert HEADLINE_EXCLUDE_DIAGONAL is True
    assert headline_field() == "toeplitzness_offdiag" and headline_field(False) == "toeplitzness"
    assert (variant_name(True), variant_name(False)) == ("exclude_diagonal", "full")
    assert (field_suffix(True), field_suffix(False)) == ("_offdiag", "")


def test_the_diagonal_makes_random_vectors_look_toeplitz_on_the_full_variant_only():
    """The evidence the choice rests on (methods page): Gaussian E, checked against the dense definition."""
    from posviz.toeplitz.engine import score_embeddings

    e = np.random.default_rng(0).standard_normal((256, 192))
    s = score_embeddings(e, null_draws=2)
    p = e @ e.T
    assert s.toeplitzness == pytest.approx(dense_r2(p, exclude_diagonal=False), abs=1e-9)
    assert s.toeplitzness_offdiag == pytest.approx(dense_r2(p, exclude_diagonal=True), abs=1e-9)
    assert s.toeplitzness > 0.3 and abs(s.toeplitzness - s.null_mean) < 0.02  # full: high, and at its null
    assert s.toeplitzness_offdiag < 0.02 and abs(s.toeplitzness_offdiag - s.null_mean_offdiag) < 0.01
    # a translation-invariant table scores 1 on both, with both nulls far below
    pos = np.arange(256)[:, None] / 10_000 ** (np.arange(0, 192, 2)[None] / 192)
    sin = score_embeddings(np.concatenate([np.sin(pos), np.cos(pos)], axis=1), null_draws=2)
    assert sin.toeplitzness_offdiag == pytest.approx(1.0, abs=1e-9) and sin.excess_offdiag == pytest.approx(1.0, abs=1e-9)


def test_toeplitzness_headlines_the_offdiagonal_r2_and_full_flips_it():
    r = runner.invoke(app, ["toeplitzness", "gaussian:128x64:0", "-f", "json", "--null-draws", "2"])
    assert r.exit_code == 0, r.output
    row = json.loads(r.stdout)[0]
    assert row["variant"] == "exclude_diagonal" and row["headline"] == "toeplitzness_offdiag"
    # field names keep their meaning: toeplitzness is the full R² whatever is headlined
    e = np.random.default_rng(0).standard_normal((128, 64))
    assert row["toeplitzness"] == pytest.approx(dense_r2(e @ e.T, exclude_diagonal=False), abs=1e-9)
    assert row["toeplitzness_offdiag"] == pytest.approx(dense_r2(e @ e.T, exclude_diagonal=True), abs=1e-9)
    full = json.loads(runner.invoke(app, ["toeplitzness", "gaussian:128x64:0", "-f", "json", "--null-draws", "2", "--full"]).stdout)[0]
    assert full["variant"] == "full" and full["headline"] == "toeplitzness"
    assert {k: v for k, v in full.items() if k not in ("variant", "headline")} == {k: v for k, v in row.items() if k not in ("variant", "headline")}

    table = runner.invoke(app, ["toeplitzness", "gaussian:128x64:0", "--null-draws", "2"]).stdout
    line = next(ln for ln in table.splitlines() if ln.strip().startswith("gaussian:128x64:0"))
    cells = line.split()
    assert cells[3] == f"{row['toeplitzness_offdiag']:.4f}" and cells[4] == f"{row['toeplitzness']:.4f}"
    assert "off-diagonal R²" in table.splitlines()[1] + table.splitlines()[0]
    assert cells[5] == f"{row['null_mean_offdiag']:.4f}"
    table = runner.invoke(app, ["toeplitzness", "gaussian:128x64:0", "--null-draws", "2", "--full"]).stdout
    cells = next(ln for ln in table.splitlines() if ln.strip().startswith("gaussian:128x64:0")).split()
    assert cells[3] == f"{row['toeplitzness']:.4f}" and cells[4] == f"{row['toeplitzness_offdiag']:.4f}"


def test_heatmap_titles_carry_the_headline_score():
    from posviz.plots.heatmap import plot_heatmap
    from posviz.read.embeddings import load_position_embeddings
    from posviz.toeplitz.engine import score_embeddings

    pe = load_position_embeddings("gaussian:96x48:3")
    s = score_embeddings(pe.matrix, null_draws=2)
    titles = [ax.get_title() for ax in plot_heatmap(pe, profile=False).axes if ax.get_title()]
    assert any(f"Toeplitzness {s.toeplitzness_offdiag:.3f} (off-diagonal R²)" in t and f"excess {s.excess_offdiag:.3f}" in t for t in titles)
    titles = [ax.get_title() for ax in plot_heatmap(pe, profile=False, exclude_diagonal=False).axes if ax.get_title()]
    assert any(f"Toeplitzness {s.toeplitzness:.3f} (full R²)" in t for t in titles)


def _rows() -> list[dict]:
    """Evaluations of a made-up v1/v2 experiment: 3 seeds, v1 to step 2, v2 to step 4."""
    rows = []
    for variant, steps, slope in (("v1", (0, 2), 0.02), ("v2", (0, 2, 4), 0.05)):
        for seed in range(3):
            for step in steps:
                t = 0.01 + slope * step + 0.003 * seed
                rows.append({"variant": variant, "seed": seed, "step": step, "eval_accuracy": 0.02 * step + 0.001 * seed,
                             "toeplitzness_ep_offdiag": t, "null_ep_offdiag": 0.01, "toeplitzness_ep": 0.3})
    return rows


def test_v1_v2_figure_places_seed_means_error_bars_and_the_arrow():
    from posviz.plots.v1v2 import final_rows, plot_v1_v2

    rows = _rows()
    fig = plot_v1_v2(rows)
    ax = fig.axes[0]
    finals = final_rows(rows)
    expected = {}
    for variant in ("v1", "v2"):
        x = np.array([r["toeplitzness_ep_offdiag"] for r in finals if r["variant"] == variant])
        y = 100 * np.array([r["eval_accuracy"] for r in finals if r["variant"] == variant])
        expected[variant] = (x.mean(), y.mean(), x.std(ddof=1), y.std(ddof=1))
    points = [tuple(np.asarray(line.get_xydata())[0]) for line in ax.lines if len(line.get_xydata()) == 1]
    for mx, my, _, _ in expected.values():
        assert any(abs(px - mx) < 1e-12 and abs(py - my) < 1e-12 for px, py in points)
    arrow = next(t for t in ax.texts if hasattr(t, "xyann"))
    assert np.allclose(arrow.xy, expected["v2"][:2]) and np.allclose(arrow.xyann, expected["v1"][:2])
    # the x error bar of v2 spans mean ± sd
    segs = [s for c in ax.collections for s in getattr(c, "get_segments", list)()]
    mx, my, sx, _ = expected["v2"]
    assert any(np.allclose(s, [[mx - sx, my], [mx + sx, my]]) for s in segs)
    assert "off-diagonal R²" in ax.get_xlabel()
