"""The explorer as one self-contained HTML file: plotly.js inlined once, the numbers as one JSON block.

The page loads nothing: no ``<script src>``, no ``<link href>``, no fonts, and a
Content-Security-Policy that forbids any connection, so that a browser without a
network shows it whole and a browser with one sends nothing. plotly.js is its
"cartesian" partial bundle (scatter, bar, heatmap, ...; MIT licence, in ``assets/``
with its licence), chosen by measurement over the full bundle that the ``plotly``
Python package ships: a third of the size and of the start-up time (docs/explore.md).
The page's own script and style sheet are package data beside it.
"""

from __future__ import annotations

import html
import json
import re
from importlib import resources
from typing import Any

#: No request may leave the page; inline scripts and styles, and data/blob images (plotly draws heatmaps to them) only.
CSP = ("default-src 'none'; script-src 'unsafe-inline' 'unsafe-eval'; style-src 'unsafe-inline'; "
       "img-src data: blob:; font-src data:; connect-src 'none'; frame-src 'none'")


def _asset(name: str) -> str:
    return resources.files("posviz.explorer").joinpath("assets", name).read_text(encoding="utf-8")


#: The vendored plotly.js bundle: npm package plotly.js-cartesian-dist-min, this version, this SHA-256 (a test checks it).
PLOTLY_BUNDLE = "plotly-cartesian.min.js"
PLOTLY_VERSION = "4.1.1"
PLOTLY_SHA256 = "79542150855a52c567260e3137095dbe2b744e6d702a5cabe67da246942fba7a"


def plotly_js() -> tuple[str, str]:
    """The plotly.js bundle the page inlines, and its version (from the bundle's own header)."""
    js = _asset(PLOTLY_BUNDLE)
    found = re.search(r"plotly\.js \(cartesian - minified\) v(\d[\w.\-]*)", js[:400])
    return js, found.group(1) if found else "unknown"


def _script_safe(text: str) -> str:
    """Text that cannot end its ``<script>`` element early."""
    return re.sub(r"</(script)", r"<\\/\1", text, flags=re.IGNORECASE)


def render_page(data: dict[str, Any], title: str, js: str) -> str:
    """The whole HTML document.

    Parameters
    ----------
    data
        Everything the page shows (JSON-ready; arrays as typed-array specs).
    title
        The document title.
    js
        The plotly.js bundle (:func:`plotly_js`).
    """
    # ``<`` as \u003c keeps ``</script>`` and ``<!--`` out of the JSON block; it is the same JSON.
    blob = json.dumps(data, separators=(",", ":"), allow_nan=False, ensure_ascii=False).replace("<", "\\u003c")
    return "".join([
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n",
        f"<meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">\n",
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n",
        f"<meta name=\"generator\" content=\"posviz {html.escape(data['sidebar']['versions']['posviz'])}\">\n",
        f"<title>{html.escape(title)}</title>\n<style>\n{_asset('explorer.css')}</style>\n</head>\n<body>\n",
        "<div id=\"app\"><aside id=\"sidebar\"></aside><main><nav id=\"tabs\"></nav><div id=\"panels\"></div></main></div>\n",
        f"<script type=\"application/json\" id=\"posviz-data\">{blob}</script>\n",
        f"<script>\n{_script_safe(js)}\n</script>\n",
        f"<script>\n{_script_safe(_asset('explorer.js'))}</script>\n</body>\n</html>\n",
    ])
