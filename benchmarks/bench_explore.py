"""Benchmark 13: the explorer's page, file size and time to first render in headless Chromium.

Budgets (issue 30): all-MiniLM-L6-v2 with every tab (6 layers x 12 heads) <= 15 MB; one 512 x 512
heatmap alone <= 8 MB; the first tab rendered in < 3 s. Beside posviz's page, the same two test
pictures, one 512 x 512 map (MiniLM's P) with hover and a 12 x 12 grid of 48 x 48 head thumbnails,
are drawn by each candidate library, inlined into one offline file:

- plotly.js, its "cartesian" partial bundle (what posviz ships), float32 typed arrays;
- plotly.js, the full bundle that the ``plotly`` Python package ships (if installed), same data;
- Bokeh with its inline resources (``bokeh.resources.INLINE``, if installed), ``image`` glyphs.

Time to first render: from navigation start to the moment the first plot is drawn (plotly:
``Plotly.newPlot``'s promise; Bokeh: its document idle, polled by Playwright), median of
``--repeats`` fresh pages, alternating the candidates. Needs Chromium (``apt-get install chromium``)
and playwright; plotly and bokeh are optional (``pip install plotly bokeh``: not posviz dependencies).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

MINILM = "sentence-transformers/all-MiniLM-L6-v2"


def _plotly_page(js: str, kind: str, maps: list[np.ndarray]) -> str:
    """A minimal offline plotly page of one map or a 12 x 12 grid, recording when it is drawn."""
    from posviz.explorer.arrays import encode_array

    specs = json.dumps([encode_array(m) for m in maps])
    script = """
const specs = SPECS, decode = (s) => { const b = atob(s.bdata), u = new Uint8Array(b.length); for (let i = 0; i < b.length; i++) u[i] = b.charCodeAt(i);
  const a = new Float32Array(u.buffer), n = s.shape[1], rows = []; for (let i = 0; i < s.shape[0]; i++) rows.push(a.subarray(i * n, (i + 1) * n)); return rows; };
const kind = "KIND", traces = [], layout = {showlegend: false, margin: {l: 10, r: 10, t: 10, b: 10}};
if (kind === "map") { traces.push({type: "heatmap", z: decode(specs[0]), hovertemplate: "i %{y}, j %{x}: %{z:.6g}<extra></extra>"});
  Object.assign(layout, {width: 560, height: 520, yaxis: {autorange: "reversed", scaleanchor: "x"}}); }
else { Object.assign(layout, {width: 1100, height: 1100, grid: {rows: 12, columns: 12, pattern: "independent"}});
  specs.forEach((s, h) => { const ax = h ? String(h + 1) : ""; traces.push({type: "heatmap", z: decode(s), showscale: false, xaxis: "x" + ax, yaxis: "y" + ax});
    layout["xaxis" + ax] = {showticklabels: false}; layout["yaxis" + ax] = {showticklabels: false, autorange: "reversed"}; }); }
Plotly.newPlot("plot", traces, layout, {displaylogo: false}).then(() => { window.__rendered = performance.now(); });
""".replace('"KIND"', json.dumps(kind)).replace("SPECS", specs)
    return f'<!DOCTYPE html><html><head><meta charset="utf-8"></head><body><div id="plot"></div><script>{js}</script><script>{script}</script></body></html>'


def _bokeh_page(kind: str, maps: list[np.ndarray]) -> str:
    from bokeh.embed import file_html
    from bokeh.layouts import gridplot
    from bokeh.models import HoverTool
    from bokeh.plotting import figure
    from bokeh.resources import INLINE

    def one(m: np.ndarray, size: int, hover: bool):
        f = figure(width=size, height=size, x_range=(0, m.shape[1]), y_range=(m.shape[0], 0), toolbar_location=None if not hover else "right")
        f.image(image=[m.astype(np.float32)], x=0, y=m.shape[0], dw=m.shape[1], dh=m.shape[0], palette="Viridis256")
        if hover:
            f.add_tools(HoverTool(tooltips=[("i", "$y{0}"), ("j", "$x{0}"), ("value", "@image")]))
        f.axis.visible = hover
        return f

    layout = one(maps[0], 520, True) if kind == "map" else gridplot([one(m, 90, False) for m in maps], ncols=12)
    return file_html(layout, resources=INLINE, title="bench")


def _first_render(browser, path: Path, ready: str) -> float:
    """Milliseconds from navigation start to the first drawn plot, in a fresh context with no network."""
    ctx = browser.new_context(offline=True, viewport={"width": 1500, "height": 1200})
    page = ctx.new_page()
    try:
        page.goto(path.as_uri())
        if ready == "bokeh":
            page.wait_for_function("window.Bokeh && Bokeh.documents.length > 0 && Bokeh.documents[0].is_idle", timeout=120_000, polling="raf")
            return float(page.evaluate("performance.now()"))
        page.wait_for_function(ready, timeout=120_000)
        expr = "window.posvizExplorer.firstRenderMs" if "posviz" in ready else "window.__rendered"
        return float(page.evaluate(expr))
    finally:
        ctx.close()


def _candidates(work: Path, p: np.ndarray, thumbs: list[np.ndarray]) -> dict[str, tuple[Path, str]]:
    """Every page to measure: name -> (file, how to know it is drawn)."""
    from posviz.explorer.page import plotly_js

    done = "window.__rendered !== undefined"
    pages: dict[str, tuple[str, str]] = {}
    cart = plotly_js()[0]
    pages["plotly.js cartesian bundle: 512×512 map"] = (_plotly_page(cart, "map", [p]), done)
    pages["plotly.js cartesian bundle: 12×12 grid"] = (_plotly_page(cart, "grid", thumbs), done)
    try:
        from plotly.offline import get_plotlyjs

        full = get_plotlyjs()
        pages["plotly.js full bundle: 512×512 map"] = (_plotly_page(full, "map", [p]), done)
        pages["plotly.js full bundle: 12×12 grid"] = (_plotly_page(full, "grid", thumbs), done)
    except ImportError:
        print("plotly not installed: the full bundle is not measured", file=sys.stderr)
    try:
        pages["Bokeh inline: 512×512 map"] = (_bokeh_page("map", [p]), "bokeh")
        pages["Bokeh inline: 12×12 grid"] = (_bokeh_page("grid", thumbs), "bokeh")
    except ImportError:
        print("bokeh not installed: Bokeh is not measured", file=sys.stderr)
    out = {}
    for i, (name, (text, ready)) in enumerate(pages.items()):
        path = work / f"page{i}.html"
        path.write_text(text, encoding="utf-8")
        out[name] = (path, ready)
    return out


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--chromium", default=os.environ.get("POSVIZ_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from playwright.sync_api import sync_playwright

    import posviz

    work = Path(tempfile.mkdtemp(prefix="posviz-bench-explore-"))
    e = posviz.load_position_embeddings(MINILM).matrix
    p = e @ e.T
    rng = np.random.default_rng(0)
    thumbs = [np.cumsum(np.cumsum(rng.normal(size=(48, 48)), 0), 1) for _ in range(144)]
    pages = _candidates(work, p, thumbs)
    every_tab = work / "minilm-explorer.html"
    posviz.explore(MINILM).save(every_tab)
    p_only = work / "minilm-p-only.html"
    posviz.explore(MINILM, heads=False).save(p_only)
    pages["posviz explore MiniLM, every tab (P first)"] = (every_tab, "window.posvizExplorer && window.posvizExplorer.firstRenderMs")
    pages["posviz explore MiniLM --no-heads (P tab only)"] = (p_only, "window.posvizExplorer && window.posvizExplorer.firstRenderMs")
    times: dict[str, list[float]] = {name: [] for name in pages}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=args.chromium, args=["--no-sandbox"])
        for path, ready in pages.values():  # warm-up: the page cache and Chromium's code cache
            _first_render(browser, path, ready)
        for _ in range(args.repeats):
            for name, (path, ready) in pages.items():
                times[name].append(_first_render(browser, path, ready))
        version = browser.version
        browser.close()
    rows = []
    for name, (path, _) in pages.items():
        t = times[name]
        rows.append({"benchmark": "13. explorer page", "page": name, "MB": f"{path.stat().st_size / 1e6:.2f}",
                     "first render ms, median (min–max)": f"{statistics.median(t):.0f} ({min(t):.0f}–{max(t):.0f})",
                     "Chromium": version})
    shutil.rmtree(work, ignore_errors=True)
    return rows


if __name__ == "__main__":
    from harness import markdown_table

    print(markdown_table(main()))
