"""The explorer in a real browser: headless Chromium (Debian's package) driven by Playwright, with no network.

Every request the page makes is blocked and counted (the page must make none), and every
console error fails the test. Where Chromium or Playwright is missing these tests skip
with one line saying how to install them, unless ``POSVIZ_REQUIRE_BROWSER=1`` (set by
``.ci/run``), where they fail instead: CI must not pass without having looked.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

import posviz

INSTALL = "apt-get install chromium (Debian's package) and pip install playwright (in the dev extra: pip install -e '.[dev]')"


def chromium_path() -> str | None:
    """The Chromium to drive: ``POSVIZ_CHROMIUM``, else ``chromium`` or ``chromium-browser`` on PATH."""
    given = os.environ.get("POSVIZ_CHROMIUM")
    return given if given and Path(given).exists() else shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def browser():
    executable = chromium_path()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
    if executable is None or sync_playwright is None:
        missing = "Chromium" if executable is None else "the playwright package"
        message = f"no headless browser ({missing} not found): {INSTALL}"
        if os.environ.get("POSVIZ_REQUIRE_BROWSER") == "1":
            pytest.fail(message + " [POSVIZ_REQUIRE_BROWSER=1: required here]")
        pytest.skip(message)
    with sync_playwright() as p:
        # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start
        b = p.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        yield b
        b.close()


class Visit:
    """A page opened offline: requests blocked and counted, console errors kept."""

    def __init__(self, browser, path: Path):
        self.requests: list[str] = []
        self.errors: list[str] = []
        self.context = browser.new_context(viewport={"width": 1500, "height": 1000}, offline=True)
        self.context.route("**/*", self._route)
        self.page = self.context.new_page()
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.goto(path.as_uri())
        self.page.wait_for_selector("body[data-ready='1']", timeout=60_000)

    def _route(self, route):
        if route.request.url.startswith("file:"):  # the page itself
            route.continue_()
        else:
            self.requests.append(route.request.url)
            route.abort()

    def check_clean(self) -> None:
        assert self.requests == [], f"the page made network requests: {self.requests}"
        assert self.errors == [], f"console errors: {self.errors}"

    def close(self) -> None:
        self.context.close()


@pytest.fixture(scope="module")
def minilm(tmp_path_factory, minilm_dir):
    """The MiniLM explorer (every tab but the corpus ones) and its E_P."""
    out = tmp_path_factory.mktemp("explore-browser") / "minilm.html"
    posviz.explore(str(minilm_dir)).save(out)
    return out, posviz.load_position_embeddings(str(minilm_dir)).matrix


def not_blank(png: bytes) -> None:
    """A screenshot that shows something: many colours, not one flat fill."""
    import io

    from matplotlib.image import imread

    pixels = imread(io.BytesIO(png), format="png")[..., :3]
    rgb = (pixels.reshape(-1, 3) * 255).astype(np.uint32)
    colours = len(np.unique(rgb[:, 0] << 16 | rgb[:, 1] << 8 | rgb[:, 2]))  # one integer per colour: np.unique(axis=0)
    # sorts rows as structured records, a minute for a full-page screenshot on 2 cores
    assert pixels.std() > 0.05 and colours > 200, f"screenshot looks blank ({colours} colours)"


def cell_point(page, plot_id: str, i: float, j: float) -> tuple[float, float]:
    """Page coordinates of the centre of cell (row i, column j) of a heatmap, in its axes' data units."""
    box = page.evaluate(
        """([id, i, j]) => { const gd = document.getElementById(id), fl = gd._fullLayout, r = gd.getBoundingClientRect();
             return [r.left + fl.xaxis._offset + fl.xaxis.l2p(j), r.top + fl.yaxis._offset + fl.yaxis.l2p(i)]; }""",
        [plot_id, i, j])
    return box[0], box[1]


def test_p_tab_renders_offline_and_is_not_blank(browser, minilm):
    visit = Visit(browser, minilm[0])
    try:
        assert visit.page.evaluate("window.posvizExplorer.firstRenderMs") > 0
        assert visit.page.locator("#p-score").inner_text().startswith("off-diagonal R²")
        not_blank(visit.page.screenshot())
        visit.check_clean()
    finally:
        visit.close()


def test_hover_reads_p_to_four_significant_digits(browser, minilm):
    path, e = minilm
    p = e @ e.T
    visit = Visit(browser, path)
    try:
        for i, j in [(100, 37), (3, 250), (411, 411)]:
            # zoom in first, as a reader does: at full view a cell of 512 is under one pixel wide
            visit.page.evaluate("([i, j]) => Plotly.relayout('p-heatmap', {'xaxis.range': [j - 8, j + 8], 'yaxis.range': [i + 8, i - 8]})", [i, j])
            visit.page.mouse.move(*cell_point(visit.page, "p-heatmap", i, j))
            tip = visit.page.locator("#tooltip")
            tip.wait_for(state="visible")
            visit.page.wait_for_function("([i, j]) => document.getElementById('tooltip').textContent.startsWith(`i = ${i}, j = ${j},`)", arg=[i, j])
            text = tip.inner_text()
            assert f"k = j − i = {j - i}" in text
            shown = float(re.search(r"P\[i, j\] = (\S+)", text).group(1))
            assert f"{shown:.4g}" == f"{p[i, j]:.4g}", (text, p[i, j])
        # the hovered offset is highlighted on the map: one line along the diagonal k = j - i
        shapes = visit.page.evaluate("document.getElementById('p-heatmap').layout.shapes")
        assert len(shapes) == 1 and shapes[0]["x0"] - shapes[0]["y0"] == 0  # the last cell hovered was on k = 0
        visit.check_clean()
    finally:
        visit.close()


def test_projection_and_residual_toggles(browser, minilm):
    visit = Visit(browser, minilm[0])
    try:
        z = "document.getElementById('p-heatmap').data[0].z[10][20]"
        before = visit.page.evaluate(z)
        visit.page.check("#p-view input[value=residual]")
        visit.page.wait_for_function(f"{z} !== {before}")
        visit.page.check("#p-view input[value=projection]")
        visit.page.wait_for_function("document.getElementById('p-heatmap').data[0].z[10][20] === document.getElementById('p-heatmap').data[0].z[30][40]")
        visit.check_clean()
    finally:
        visit.close()


def test_layer_slider_changes_the_head_grid(browser, minilm):
    visit = Visit(browser, minilm[0])
    try:
        page = visit.page
        page.click("#tabbtn-heads")
        page.wait_for_function("document.getElementById('heads-grid').data && document.getElementById('heads-grid').data.length === 12")
        grid = "Array.from(document.getElementById('heads-grid').data[4].z[7])"
        titles = "document.getElementById('heads-grid').layout.annotations.map(a => a.text).join('|')"
        before, titles_before = page.evaluate(grid), page.evaluate(titles)
        page.focus("#layer-slider")
        for _ in range(3):
            page.keyboard.press("ArrowRight")
        page.wait_for_function("document.getElementById('layer-label').textContent === '3'")
        assert page.evaluate(grid) != before and page.evaluate(titles) != titles_before
        assert "layer 3" in page.locator("#heads-info").inner_text()
        page.click("#heads-table tbody tr:nth-child(6)")  # a row of the table shows its head at full resolution
        page.wait_for_function("document.getElementById('head-map').data[0].z.length === 512")
        not_blank(page.screenshot())
        visit.check_clean()
    finally:
        visit.close()


def test_comparison_zoom_is_synchronised(browser, tmp_path):
    path = tmp_path / "two.html"
    posviz.explore(["sinusoidal:96x16", "gaussian:96x16:3"], null_draws=0).save(path)
    visit = Visit(browser, path)
    try:
        page = visit.page
        page.click("#tabbtn-compare")
        page.wait_for_function("document.getElementById('compare-1') && document.getElementById('compare-1').data")
        page.evaluate("Plotly.relayout('compare-0', {'xaxis.range[0]': 10, 'xaxis.range[1]': 30})")
        page.wait_for_function("JSON.stringify(document.getElementById('compare-1').layout.xaxis.range) === '[10,30]'")
        visit.check_clean()
    finally:
        visit.close()


def test_notebook_output_renders_inline_offline(browser, tmp_path):
    """``_repr_html_`` as a notebook shows it: the output cell's HTML inside a page, the explorer in its sandboxed
    ``<iframe srcdoc>``; it renders there with no request and no console error. The host page declares no encoding
    (Chromium then guesses one from the bytes): the output is ASCII, so ``R²`` reads right whatever it guesses."""
    explorer = posviz.explore("sinusoidal:64x16")
    assert explorer._repr_html_().isascii()
    cell = tmp_path / "notebook.html"
    cell.write_text(f"<!DOCTYPE html><html><body><div class='output'>{explorer._repr_html_()}</div>"
                    "<script>document.body.dataset.ready = '1';</script></body></html>", encoding="utf-8")
    visit = Visit(browser, cell)
    try:
        frame = visit.page.frame_locator("iframe").locator("body[data-ready='1']")
        frame.wait_for(timeout=60_000)
        assert visit.page.frame_locator("iframe").locator("#p-score").inner_text().startswith("off-diagonal R²")
        not_blank(visit.page.screenshot())
        visit.check_clean()
    finally:
        visit.close()


def test_attention_tab_shows_spans_sink_rate_and_the_received_curve(browser, absolute_run, train_corpus, tmp_path):
    """The Attention tab of a trained run: the tiled statistics (entropy, spans) as table columns, the layer's sink
    rate, and a head's positional-bias curve (attention received by key position) beside its offset profile."""
    path = tmp_path / "attention.html"
    page_data = posviz.explore(str(absolute_run), corpus=str(train_corpus), seq_len=32, max_blocks=4, heads=False)
    page_data.save(path)
    records = page_data.data["models"][0]["corpus"]["attention"]["records"]
    visit = Visit(browser, path)
    try:
        page = visit.page
        # titles and menus show the run's folder name, the provenance its full path
        assert page.title() == f"posviz explorer: {absolute_run.name}"
        assert str(absolute_run) in page_data.data["models"][0]["name"]
        # the corpus tabs, one per measure of the registry with a view on the page, in registry order
        buttons = page.locator("#tabs button").all_inner_texts()
        assert "Attention" in buttons and buttons[buttons.index("Attention") + 1] == "Hidden states"
        page.click("#tabbtn-attention")
        page.wait_for_function("document.getElementById('attn-profile') && document.getElementById('attn-profile').data")
        headers = page.locator("#attn-table th").all_inner_texts()
        if "span90" in records[0]:  # the tiled path (transformers 5); the eager path of 4.x has no span columns
            assert {"span 50 %", "span 90 %", "entropy / log keys"} <= set(headers)
            assert "sink rate" in page.locator("#attn-sink-rate").inner_text()
            page.click("#attn-table tbody tr:nth-child(3)")
            chosen = page.evaluate("document.getElementById('attn-received').layout.title.text")
            assert chosen.endswith("head 2") and page.evaluate("document.getElementById('attn-received').data[0].y.length") > 0
        else:
            assert "span 90 %" not in headers
        not_blank(page.screenshot())
        visit.check_clean()
    finally:
        visit.close()


def test_measures_tab_shows_a_registered_text_measure(browser, absolute_run, train_corpus, tmp_path):
    """``--measure state-norms``: a Measures tab with the measure's values under its column labels and its per-layer
    table, from the same pass as the Attention and Hidden-states tabs."""
    path = tmp_path / "measures.html"
    page_data = posviz.explore(str(absolute_run), corpus=str(train_corpus), seq_len=32, max_blocks=4, heads=False,
                               measures=["state-norms"])
    page_data.save(path)
    shown = page_data.data["models"][0]["corpus"]["measures"]["state-norms"]
    visit = Visit(browser, path)
    try:
        page = visit.page
        page.click("#tabbtn-measures")
        page.wait_for_selector("#measure-table-state-norms tbody tr")
        assert page.locator("#measure-state-norms").inner_text() == "state-norms (posviz)"
        import re

        read = re.search(r"first / median norm: ([-0-9.e+]+)", page.locator(".measure-values").inner_text())
        assert read and float(read.group(1)) == pytest.approx(shown["values"]["first_norm_ratio"], rel=1e-3)
        assert page.locator("#measure-table-state-norms tbody tr").count() == len(shown["records"]) == 5  # 4 layers + embeddings
        visit.check_clean()
    finally:
        visit.close()
