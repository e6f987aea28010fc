"""``posviz report`` of fine-tuned runs: the fine-tuning section, read back from the rendered PDF.

Real ``posviz train`` runs (copies of the session fixtures) with fine-tuning results
in the documented layout (tests/finetune_results.py); pages rendered with pypdfium2,
text extracted with pypdf, plotted data checked on the figures' artists.
"""

from __future__ import annotations

import statistics

import numpy as np
import pypdfium2 as pdfium
import pytest
from pypdf import PdfReader
from typer.testing import CliRunner

from posviz.cli.app import app
from tests.checkpoint_factory import isolate_hf_cache
from tests.figures import by_gid
from tests.finetune_results import ABSOLUTE, TISA, mean_of_medians, task_score
from tests.reference import pdf_outline

runner = CliRunner()


def test_report_has_a_fine_tuning_page_per_fine_tuned_run(fine_tuned, tmp_path, monkeypatch):
    isolate_hf_cache(monkeypatch, tmp_path / "empty")  # offline, no ALBERT: that section is left out
    abs_run, tisa_run = fine_tuned
    out = tmp_path / "r.pdf"
    r = runner.invoke(app, ["report", str(abs_run), str(tisa_run), "-o", str(out), "--null-draws", "2",
                            "--no-albert"], env={"SOURCE_DATE_EPOCH": "1700000000"})
    assert r.exit_code == 0, r.output
    reader = PdfReader(out)
    texts = [p.extract_text() for p in reader.pages]
    outline = pdf_outline(reader)
    top = [t for t, d, _ in outline if d == 0]
    assert top.index("Fine-tuning results") == top.index("Training runs") + 1
    pages = [(t, p) for t, d, p in outline if d == 1 and p >= dict((t, p) for t, d, p in outline if d == 0)["Fine-tuning results"]]
    assert [t for t, _ in pages][:2] == [str(abs_run), str(tisa_run)]
    abs_page, tisa_page = texts[pages[0][1]], texts[pages[1][1]]
    assert f"Fine-tuning results: {abs_run}" in abs_page and "fine-tuned on 3 tasks at 2 checkpoints (steps 6, 12)" in abs_page
    # table rows: step, task, metric, median, min – max, seeds (hand computations from the values written)
    assert "6 builtin/bshift accuracy (= score) 58.00 55.00 – 60.00 3" in abs_page  # one metric: its score shares the row
    assert "6 builtin/bshift score" not in abs_page
    stsb = statistics.median(task_score(ABSOLUTE[12]["glue/stsb"]))
    rest = "\n".join(texts[pages[0][1] : pages[1][1]])  # the abs run's page and its continuation
    assert "Fine-tuning results: " + str(abs_run) + " (continued)" in rest
    assert "12 builtin/topic accuracy (= score) 74.00 71.00 – 75.00 3" in rest
    assert f"12 glue/stsb score {stsb:.2f}" in rest and "12 glue/stsb spearman 24.00 22.00 – 26.00 2" in rest
    assert "12 builtin/bshift accuracy (= score) 53.00 52.00 – 54.00 2" in tisa_page
    assert "mean score over builtin/bshift, builtin/topic" in abs_page.replace("\n", " ")
    methods = "\n".join(t for t in texts if t.startswith("Methods"))
    assert "Fine-tuning results" in methods and "median over fine-tuning seeds" in methods.replace("\n", " ")
    assert "never drawn on its axis" in methods.replace("\n", " ")
    doc = pdfium.PdfDocument(str(out))
    for i in (pages[0][1], pages[1][1]):
        img = np.asarray(doc[i].render(scale=0.4).to_pil().convert("L"), dtype=float)
        assert img.std() > 10 and (img < 128).mean() < 0.5  # drawn, not blank
    doc.close()


def test_fine_tuning_figures_plot_the_medians(fine_tuned, absolute_run, tmp_path, monkeypatch):
    from posviz.report import ReportOptions, build_context
    from posviz.report.sections import finetune

    isolate_hf_cache(monkeypatch, tmp_path / "empty")
    abs_run, tisa_run = fine_tuned
    ctx = build_context([str(abs_run), str(absolute_run), str(tisa_run)], ReportOptions(null_draws=0, albert=False))
    pages = finetune.build(ctx)
    # the abs run's 11 rows continue on a second page; the run without results has none
    assert [p.get_label() for p in pages] == [str(abs_run), "", str(tisa_run)]
    abs_fig = pages[0]
    # several checkpoints: each task's median score against the step, min–max as error bars
    line = by_gid(abs_fig, "run-task:builtin/bshift")
    np.testing.assert_allclose(line.get_xydata(), [(6, 58.0), (12, 63.0)])
    stsb = by_gid(abs_fig, "run-task:glue/stsb")
    np.testing.assert_allclose(stsb.get_xydata(), [(12, statistics.median(task_score(ABSOLUTE[12]["glue/stsb"])))])
    down = by_gid(abs_fig, f"downstream:{abs_run} (absolute; 2 tasks)")
    assert down.get_ydata() == pytest.approx([mean_of_medians(ABSOLUTE[s], ["builtin/bshift", "builtin/topic"]) for s in (6, 12)])
    assert down.axes.get_xlabel() == "Toeplitzness of P = E_P E_Pᵀ, off-diagonal R²"  # E_P: no word on head means
    # one checkpoint: bars
    tisa_fig = pages[-1]
    bar = by_gid(tisa_fig, "run-task:builtin/topic")
    assert [a.get_xlabel().endswith("mean over the layer-0 heads)") for a in tisa_fig.axes if a.get_xlabel()] == [False, True]
    assert bar.get_height() == statistics.median(TISA[12]["builtin/topic"]["accuracy"])


def test_albert_page_puts_fine_tuned_runs_on_their_own_panel(albert_cache, fine_tuned, absolute_run):
    """As --plot-vs-glue --run: the fine-tuned run on a downstream panel, the other run on the masked-LM panel."""
    from posviz.report import ReportOptions, build_context
    from posviz.report.sections import albert
    from posviz.series.downstream import DOWNSTREAM_YLABEL

    abs_run, _ = fine_tuned
    ctx = build_context([str(abs_run), str(absolute_run)], ReportOptions(null_draws=0))
    figure, _values = albert.build(ctx)
    down = by_gid(figure, f"downstream:{abs_run} (absolute; 2 tasks)")
    mlm = by_gid(figure, f"trajectory:{absolute_run} (absolute)")
    reference = by_gid(figure, "point:base v1")
    assert len({down.axes, mlm.axes, reference.axes}) == 3
    assert down.axes.get_ylabel() == "Mean downstream score (%)\n(each run's own tasks)"  # short: two panels stacked
    assert mlm.axes.get_ylabel() == "Held-out masked-token\naccuracy (%)"
    ctx = build_context([str(abs_run)], ReportOptions(null_draws=0))
    assert by_gid(albert.build(ctx)[0], f"downstream:{abs_run} (absolute; 2 tasks)").axes.get_ylabel() == DOWNSTREAM_YLABEL
    assert down.get_ydata() == pytest.approx([64.5, 68.5])
    assert down.axes.get_xlabel() == mlm.axes.get_xlabel() == "Toeplitzness of P, off-diagonal R²"  # both runs absolute
    assert not figure.findobj(lambda a: a.get_gid() == f"trajectory:{abs_run} (absolute)")  # not on the masked-LM panel
