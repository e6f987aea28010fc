"""Results in a notebook, as a user sees them: a real Jupyter kernel (nbclient, ipykernel) runs cells that end in
``posviz.attention(...)``, ``posviz.hidden(...)`` and ``posviz.extrapolate(...)``; each shows its figure and table
inline (the HTML formatters ``import posviz`` registers in IPython), no cell prints a warning, and the outputs render offline in Chromium."""

from __future__ import annotations

import base64
import json
import os
import re
import sys

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")


@pytest.fixture(scope="module")
def executed(absolute_run, train_corpus, tmp_path_factory):
    """The notebook, executed once per test run by a real kernel (the interpreter running the tests)."""
    from tests.conftest import made_once

    folder = made_once(tmp_path_factory, "notebook", lambda out: _execute(out, str(absolute_run), str(train_corpus)))
    return nbformat.read(folder / "executed.ipynb", as_version=4)


def _execute(folder, run: str, corpus: str) -> None:
    """Run the notebook's cells in a kernel of this interpreter; write the executed notebook to ``folder``."""
    cells = [
        "import posviz",
        f"posviz.attention({run!r}, corpus={corpus!r}, seq_len=32, max_blocks=4, layers='all')",
        f"posviz.hidden({run!r}, corpus={corpus!r}, seq_len=32, max_blocks=8)",
        f"posviz.extrapolate({run!r}, corpus={corpus!r}, lengths='16,32', max_blocks=2)",
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    # a kernelspec of this interpreter in a folder of the test's own, whatever kernels the machine has installed
    spec = folder / "jupyter" / "kernels" / "posviz-test"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                                                  "display_name": "posviz test", "language": "python"}), encoding="utf-8")
    saved = {k: os.environ.get(k) for k in ("JUPYTER_PATH", "JUPYTER_RUNTIME_DIR", "IPYTHONDIR")}
    os.environ.update(JUPYTER_PATH=str(folder / "jupyter"), JUPYTER_RUNTIME_DIR=str(folder / "runtime"), IPYTHONDIR=str(folder / "ipython"))
    try:
        nbclient.NotebookClient(nb, timeout=600, kernel_name="posviz-test", resources={"metadata": {"path": str(folder)}}).execute()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    nbformat.write(nb, folder / "executed.ipynb")


def _html(cell) -> str:
    found = [o["data"]["text/html"] for o in cell.outputs if o.get("output_type") == "execute_result" and "text/html" in o.get("data", {})]
    assert found, f"cell {cell.source!r} shows no HTML: {cell.outputs}"
    return found[0]


@pytest.mark.parametrize(("index", "title", "column"), [(1, "posviz attention:", "toeplitzness_offdiag"),
                                                        (2, "posviz hidden:", "positional_share"),
                                                        (3, "posviz extrapolate:", "loss")])
def test_a_cell_ending_in_a_result_shows_its_figure_and_table(executed, index, title, column):
    page = _html(executed.cells[index])
    assert title in page and f"<th>{column}</th>" in page
    png = re.search(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", page)
    assert png and base64.b64decode(png.group(1))[:8] == b"\x89PNG\r\n\x1a\n"


def test_no_cell_prints_a_warning_or_an_error(executed):
    for cell in executed.cells:
        streams = [o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream" and o.get("name") == "stderr"]
        errors = [o for o in cell.outputs if o.get("output_type") == "error"]
        assert not errors, errors
        assert not any("IProgress" in s or "Warning" in s for s in streams), streams


def test_the_outputs_render_offline_in_chromium(executed, tmp_path):
    from tests.integration.test_explore_browser import INSTALL, Visit, chromium_path, not_blank

    executable = chromium_path()
    sync = pytest.importorskip("playwright.sync_api", reason=INSTALL).sync_playwright
    if executable is None:
        if os.environ.get("POSVIZ_REQUIRE_BROWSER") == "1":
            pytest.fail(f"no headless browser: {INSTALL} [POSVIZ_REQUIRE_BROWSER=1: required here]")
        pytest.skip(f"no headless browser: {INSTALL}")
    page = tmp_path / "outputs.html"
    body = "".join(f"<div class='output'>{_html(c)}</div>" for c in executed.cells[1:])
    page.write_text(f"<!DOCTYPE html><html><body>{body}<script>document.body.dataset.ready = '1';</script></body></html>",
                    encoding="utf-8")
    with sync() as p:
        b = p.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        try:
            visit = Visit(b, page)
            try:
                widths = visit.page.evaluate("Array.from(document.images).map(i => i.complete ? i.naturalWidth : 0)")
                assert len(widths) == 3 and min(widths) > 100, widths
                assert visit.page.locator("table").count() == 3
                not_blank(visit.page.screenshot(full_page=True))
                visit.check_clean()
            finally:
                visit.close()
        finally:
            b.close()
