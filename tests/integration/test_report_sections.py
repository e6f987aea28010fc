"""``posviz report`` with training runs and the ALBERT v1 → v2 section: real runs, real PDFs read back.

The runs are real ``posviz train`` runs (session fixtures ``absolute_run`` and
``tisa_run`` in conftest.py); the ALBERT checkpoints are the eight planted tiny
ALBERTs of ``tests/albert_planted.py`` in a fake offline HF cache. Pages are
rendered with pypdfium2 and their text extracted with pypdf; plotted data is
checked on the figures' artists (gids) through the Python API, which draws the
same pages.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pypdfium2 as pdfium
import pytest
from pypdf import PdfReader
from typer.testing import CliRunner

import posviz
from posviz.cli.app import app
from tests.albert_planted import RACE, SIZES, WEIGHTS, hub_id
from tests.checkpoint_factory import isolate_hf_cache
from tests.figures import by_gid
from tests.reference import dense_toeplitzness, pdf_outline

runner = CliRunner()
EPOCH = "1700000000"
MINILM = "sentence-transformers/all-MiniLM-L6-v2"  # the packaged real model, offline
NUMBER = re.compile(r"-?\d+\.\d{4}\b")


@pytest.fixture
def offline(tmp_path, monkeypatch):
    """No ALBERT checkpoint anywhere: an empty HF cache, offline."""
    isolate_hf_cache(monkeypatch, tmp_path / "empty")


def _report(out: Path, *inputs: str, extra: tuple[str, ...] = ()) -> PdfReader:
    r = runner.invoke(app, ["report", *inputs, "-o", str(out), "--null-draws", "3", *extra], env={"SOURCE_DATE_EPOCH": EPOCH})
    assert r.exit_code == 0, r.output
    return PdfReader(out)


def _children(outline: list[tuple[str, int, int]], section: str) -> list[str]:
    """Bookmark titles under one top-level section."""
    out, inside = [], False
    for title, depth, _ in outline:
        if depth == 0:
            inside = title == section
        elif inside and depth == 1:
            out.append(title)
    return out


def _log(run: Path) -> list[dict]:
    return json.loads((run / "trajectory.json").read_text())["evaluations"]


def _f(x: float, digits: int = 4) -> str:
    return f"{x:.{digits}f}"


def _render_ok(path: Path) -> None:
    doc = pdfium.PdfDocument(str(path))
    for page in doc:
        img = np.asarray(page.render(scale=0.4).to_pil().convert("L"), dtype=float)
        assert img.std() > 10 and (img < 128).mean() < 0.5  # drawn, not blank, not black
    doc.close()


# ---- training runs -------------------------------------------------------------
def test_report_of_two_runs(absolute_run, tisa_run, tmp_path, offline):
    out = tmp_path / "runs.pdf"
    a, b = str(absolute_run), str(tisa_run)
    reader = _report(out, a, b)
    texts = [p.extract_text() for p in reader.pages]
    outline = pdf_outline(reader)
    # title, summary, the absolute run's P (tisa has no table), both runs' heads, training runs, methods
    assert [t for t, d, _ in outline if d == 0] == ["Title page", "Summary", "Position similarity P",
                                                    "Per-head positional attention", "Training runs", "Methods"]
    assert _children(outline, "Position similarity P") == [a]
    assert _children(outline, "Per-head positional attention")[0] == f"{a}: layer 0"
    assert f"{b}: layer 0" in _children(outline, "Per-head positional attention")
    for title, _, page in outline[1:]:
        assert title.split(":")[0] in texts[page]
    first = texts[0]
    assert "2 training runs" in first
    assert "scheme absolute, 12 steps" in first and "scheme tisa, 12 steps" in first
    assert "checkpoint-12" in first
    assert "Left out: ALBERT v1 → v2" in first  # offline, no checkpoints: said on the title page ...
    assert all("ALBERT v1 → v2: Toeplitzness" not in t for t in texts[1:4])  # ... and no page for it

    # Summary: the run's row comes from its final checkpoint (the API's score, and the dense definition)
    ms = posviz.score_model(str(absolute_run / "checkpoint-12"), null_draws=3)
    numbers = NUMBER.findall(texts[1])
    assert numbers[0] == _f(ms.score.toeplitzness_offdiag)  # the headline first, the full R² after its null and excess
    assert numbers[4] == _f(ms.score.toeplitzness) == _f(dense_toeplitzness(ms.embeddings.matrix))
    assert "32 × 64" in texts[1] and "0–31" in texts[1]
    assert "tisa" in texts[1] and "TISA adds a learned translation-invariant score" in texts[1]

    # Training page: each run's first and last evaluation, as logged
    pages = {t: p for t, d, p in outline if d == 0}
    assert all(t.startswith("Methods (continued)") for t in texts[pages["Methods"] + 1 :])  # methods run to the end
    training = texts[pages["Training runs"]]
    for run in (absolute_run, tisa_run):
        first_ev, last_ev = _log(run)[0], _log(run)[-1]
        assert f"{_f(first_ev['eval_loss'], 3)} → {_f(last_ev['eval_loss'], 3)}" in training
        assert f"{_f(100 * first_ev['eval_accuracy'], 2)} → {_f(100 * last_ev['eval_accuracy'], 2)}" in training
        assert f"{_f(first_ev['toeplitzness_heads_offdiag_mean'])} → {_f(last_ev['toeplitzness_heads_offdiag_mean'])}" in training
    ev = _log(absolute_run)
    assert f"{_f(ev[0]['toeplitzness_ep_offdiag'])} → {_f(ev[-1]['toeplitzness_ep_offdiag'])}" in training
    assert f"{_f(ev[0]['toeplitzness_ep'])} → {_f(ev[-1]['toeplitzness_ep'])}" in training and _f(ev[-1]["null_ep_offdiag"]) in training
    assert _log(tisa_run)[-1]["toeplitzness_heads_mean"] == pytest.approx(1.0)  # TISA's scores are exactly Toeplitz

    # Methods: TISA and TUPE definitions with their citations
    methods = "\n".join(texts[pages["Methods"] :])
    for phrase in ("f(k) = Σ a_s exp(−|b_s| (k − c_s)²)", "k = j − i", "√(2d)", "[CLS]", "TUPE-R", "32 buckets",
                   "Wennberg & Henter", "Ke, He & Liu", "arXiv:2106.01950", "arXiv:2006.15595"):
        assert phrase in methods, phrase
    assert a in reader.metadata["/Keywords"] and b in reader.metadata["/Keywords"]
    _render_ok(out)


def test_training_figure_plots_the_logs(absolute_run, tisa_run, offline):
    """The four panels hold exactly the logged values (checked on the figure's artists)."""
    from posviz.report import build_context
    from posviz.report.sections import training

    ctx = build_context([str(absolute_run), str(tisa_run)])
    (fig,) = training.build(ctx)
    for run in (absolute_run, tisa_run):
        ev, label = _log(run), str(run)
        steps = [r["step"] for r in ev]
        assert steps == [0, 6, 12]
        np.testing.assert_allclose(by_gid(fig, f"eval_loss:{label}").get_xydata(), [(s, r["eval_loss"]) for s, r in zip(steps, ev, strict=True)])
        np.testing.assert_allclose(by_gid(fig, f"eval_accuracy:{label}").get_xydata(), [(s, 100 * r["eval_accuracy"]) for s, r in zip(steps, ev, strict=True)])
        np.testing.assert_allclose(by_gid(fig, f"toeplitzness_heads_mean:{label}").get_xydata(),
                                   [(s, r["toeplitzness_heads_mean"]) for s, r in zip(steps, ev, strict=True)])
        train = [(r["step"], r["train_loss"]) for r in ev if r["train_loss"] is not None]
        np.testing.assert_allclose(by_gid(fig, f"train_loss:{label}").get_xydata(), train)
    ev = _log(absolute_run)
    np.testing.assert_allclose(by_gid(fig, f"toeplitzness_ep:{absolute_run}").get_xydata(), [(r["step"], r["toeplitzness_ep"]) for r in ev])
    assert not fig.findobj(lambda a: a.get_gid() == f"toeplitzness_ep:{tisa_run}")  # no table, no E_P line
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == [f"{absolute_run} (absolute)", f"{tisa_run} (tisa)"]


def test_run_next_to_a_model(absolute_run, tmp_path, offline):
    out = tmp_path / "mixed.pdf"
    reader = _report(out, str(absolute_run), MINILM)
    texts = [p.extract_text() for p in reader.pages]
    assert "1 model, 1 training run" in texts[0]
    outline = pdf_outline(reader)
    assert _children(outline, "Position similarity P") == [str(absolute_run), MINILM]
    numbers = NUMBER.findall(texts[1])
    run_score = posviz.score_model(str(absolute_run / "checkpoint-12"), null_draws=3).score
    minilm = posviz.score_model(MINILM, null_draws=3).score
    assert numbers[0] == _f(run_score.toeplitzness_offdiag) and numbers[8] == _f(minilm.toeplitzness_offdiag) == "0.4772"
    assert numbers[12] == _f(minilm.toeplitzness) == "0.4742"
    assert [t for t, d, _ in outline if d == 0] == ["Title page", "Summary", "Position similarity P", "Per-head positional attention",
                                                    "Training runs", "Methods"]
    assert "512 × 384" in texts[0] and "scheme absolute, 12 steps" in texts[0]


def test_run_folder_without_log_and_unfinished_run(absolute_run, tmp_path, offline):
    from posviz.report.runs import RunInfo

    early = tmp_path / "early"
    early.mkdir()
    shutil.copy(absolute_run / "run.json", early / "run.json")  # started, never evaluated
    out = tmp_path / "r.pdf"
    r = runner.invoke(app, ["report", str(early), "-o", str(out)])
    assert r.exit_code == 2 and r.output.startswith("error: ") and "without a training log yet" in r.output
    assert len(r.output.strip().splitlines()) == 1 and not out.exists()
    info = RunInfo(path="x", scheme="tisa", size="tiny", steps=200, planned_steps=500, checkpoint=None)
    assert info.describe() == "scheme tisa, 200 of 500 steps"


# ---- the ALBERT section --------------------------------------------------------
def test_albert_section_with_planted_checkpoints(albert_cache, planted, absolute_run, tmp_path):
    out = tmp_path / "albert.pdf"
    reader = _report(out, MINILM, str(absolute_run), extra=("--score", f"{MINILM}=78.5", "--metric", "race"))
    texts = [p.extract_text() for p in reader.pages]
    outline = pdf_outline(reader)
    albert = [(t, d, p) for t, d, p in outline if t.startswith("ALBERT")]
    assert len(albert) == 1
    page = albert[0][2]
    assert [(t, p) for t, d, p in outline if d == 1 and p in (page, page + 1)] == [("figure", page), ("values", page + 1)]
    assert "Left out" not in texts[0] and "Incomplete" not in texts[0]
    assert re.search(r"\d\s+ALBERT v1 → v2: Toeplitzness vs performance\s+page " + str(page + 1), texts[0])

    fig_text, values = texts[page], texts[page + 1]
    assert "RACE accuracy against the Toeplitzness" in fig_text and "1 report input placed by --score" in fig_text
    assert "google-research/albert README" in fig_text
    lines = values.splitlines()
    for key, p in planted.items():
        row = next(ln for ln in lines if ln.startswith(hub_id(*key)))
        assert _f(p.offdiag) in row and f"{RACE[key]:.2f}" in row, (key, row)
    minilm_row = next(ln for ln in lines if "report input" in ln)
    assert "0.4772" in minilm_row and "78.50" in minilm_row
    for size in SIZES:
        dx = planted[(size, "v2")].offdiag - planted[(size, "v1")].offdiag
        assert f"{size}: v1 → v2 Toeplitzness {dx:+.4f}, race {RACE[(size, 'v2')] - RACE[(size, 'v1')]:+.2f}" in values

    methods = "\n".join(texts[page + 2 :])
    for phrase in ("(F1 + EM)/2", "mean of five tasks", "google-research/albert", "arXiv:1909.11942", "arXiv:2106.01950"):
        assert phrase in methods, phrase
    _render_ok(out)


def test_albert_figure_plots_the_scores_and_the_run(albert_cache, planted, absolute_run):
    """Points, arrows, the --score model and the run's trajectory, read from the page's artists."""
    from posviz.report import ReportOptions, build_context
    from posviz.report.sections import albert

    ctx = build_context([MINILM, str(absolute_run)], ReportOptions(null_draws=2, scores={MINILM: 78.5}))
    figure, _values = albert.build(ctx)
    from tests.albert_planted import AVERAGE

    for key, p in planted.items():
        point = by_gid(figure, f"point:{key[0]} {key[1]}")
        assert point.get_xydata()[0] == pytest.approx((p.offdiag, AVERAGE[key]), rel=1e-9, abs=1e-9)
    for size in SIZES:
        arrow = by_gid(figure, f"arrow:{size}")
        assert (arrow.xy[0] > arrow.xyann[0]) is (WEIGHTS[(size, "v2")] > WEIGHTS[(size, "v1")])
    minilm = posviz.score_model(MINILM, null_draws=2).score
    assert by_gid(figure, "point:all-MiniLM-L6-v2").get_xydata()[0] == pytest.approx((minilm.toeplitzness_offdiag, 78.5))
    ev = _log(absolute_run)
    line = by_gid(figure, f"trajectory:{absolute_run} (absolute)")
    np.testing.assert_allclose(line.get_xydata(), [(r["toeplitzness_ep_offdiag"], 100 * r["eval_accuracy"]) for r in ev])
    assert line.axes is not by_gid(figure, "point:base v1").axes  # the runs' own panel


def test_albert_section_left_out_offline_then_from_the_score_cache(empty_albert_cache, planted, tmp_path, tiny_checkpoints):
    model = str(tiny_checkpoints("bert"))  # any model with positions: the section places the report beside ALBERT
    # Nothing cached: the report is written without the section, and the title page says why and what to do.
    reader = _report(tmp_path / "a.pdf", model)
    first = reader.pages[0].extract_text()
    assert not any(t.startswith("ALBERT") for t, _, _ in pdf_outline(reader))
    note = re.sub(r"\s+", " ", first[first.index("Left out:") :])
    assert note.startswith("Left out: ALBERT v1 → v2: Toeplitzness vs performance: the 8 ALBERT checkpoints are in neither")
    assert "HF_HUB_OFFLINE is set" in note and "posviz toeplitzness --plot-vs-glue" in note and "--no-albert" in note

    # Five of eight in the HF cache: the section is drawn, marked incomplete, and the title page names the others.
    missing = [("large", "v2"), ("xxlarge", "v1"), ("xxlarge", "v2")]
    empty_albert_cache([k for k in planted if k not in missing])
    reader = _report(tmp_path / "b.pdf", model)
    texts = [p.extract_text() for p in reader.pages]
    assert "Incomplete: ALBERT v1 → v2: Toeplitzness vs performance shows 5 of the 8 ALBERT checkpoints" in re.sub(r"\s+", " ", texts[0])
    page = next(p for t, _, p in pdf_outline(reader) if t.startswith("ALBERT"))
    assert "INCOMPLETE: 3 ALBERT checkpoints not shown" in texts[page]
    assert all(hub_id(*k) in re.sub(r"\s+", "", texts[page + 1]) for k in missing)

    # All eight once: scored into the posviz score cache; then the HF cache can go and the section stays.
    empty_albert_cache()
    full = _report(tmp_path / "c.pdf", model)
    shutil.rmtree(empty_albert_cache.cache_dir)
    empty_albert_cache.cache_dir.mkdir()
    again = _report(tmp_path / "d.pdf", model)
    outline = pdf_outline(full)
    first = next(p for t, d, p in outline if t == "ALBERT v1 → v2: Toeplitzness vs performance")
    assert pdf_outline(again) == outline and [t for t, _, p in outline if p in (first, first + 1)] == [
        "ALBERT v1 → v2: Toeplitzness vs performance", "figure", "values"]
    for page in (first, first + 1):  # the figure and the values page
        assert again.pages[page].extract_text() == full.pages[page].extract_text()
    assert "ALBERT v1 → v2: Toeplitzness vs performance (values)" in full.pages[first + 1].extract_text()
    assert "Left out" not in again.pages[0].extract_text()

    # --no-albert: no section, no note (the same context otherwise gives both pages).
    from posviz.report import ReportOptions, build_context
    from posviz.report.sections import albert

    assert len(albert.build(build_context([model], ReportOptions(null_draws=3)))) == 2
    ctx = build_context([model], ReportOptions(null_draws=3, albert=False))
    assert albert.build(ctx) == [] and ctx.notes == []


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["--score", "other/model=80"], "--score other/model: not one of the report's inputs"),
        (["--score", f"{MINILM}=abc"], "not a finite number"),
        (["--score", f"{MINILM}=80", "--no-albert"], "--no-albert leaves out"),
        (["--metric", "bleu"], "Invalid value"),
    ],
)
def test_bad_report_options_are_one_line_errors(tmp_path, offline, args, fragment):
    out = tmp_path / "r.pdf"
    r = runner.invoke(app, ["report", MINILM, "-o", str(out), *args])
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], r.output
    assert not out.exists()


def test_score_for_a_run_without_a_table_is_refused(offline, tisa_run, tmp_path):
    out = tmp_path / "r.pdf"
    r = runner.invoke(app, ["report", str(tisa_run), "-o", str(out), "--score", f"{tisa_run}=60"])
    assert r.exit_code == 2 and "has no learned absolute position table" in r.output and not out.exists()
