"""``posviz report``: real PDFs, read back with pypdf (text, outline, images) and pypdfium2 (rendering)."""

from __future__ import annotations

import io
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pypdfium2 as pdfium
import pytest
from pypdf import PdfReader
from typer.testing import CliRunner

import posviz
from posviz.cli.app import app
from posviz.plots.common import short_label
from tests.checkpoint_factory import isolate_hf_cache
from tests.reference import dense_toeplitzness, pdf_outline

runner = CliRunner()
EPOCH = "1700000000"  # 2023-11-14 UTC
NUMBER = re.compile(r"-?\d+\.\d{4}\b")


@pytest.fixture(scope="module", autouse=True)
def _no_albert_checkpoints(tmp_path_factory):
    """Offline with an empty HF cache and an empty score cache, so the ALBERT section is left out whatever the
    machine's caches hold (this also covers the module-scoped report below, built before any per-test fixture).

    The ALBERT section itself is tested in test_report_sections.py.
    """
    with pytest.MonkeyPatch.context() as mp:
        isolate_hf_cache(mp, tmp_path_factory.mktemp("no-albert"))
        mp.setenv("POSVIZ_CACHE_DIR", str(tmp_path_factory.mktemp("no-albert-scores")))
        yield


def _report(out: Path, *models: str, epoch: str | None = EPOCH, extra: tuple[str, ...] = ()):
    env = {"SOURCE_DATE_EPOCH": epoch} if epoch else {}
    r = runner.invoke(app, ["report", *models, "-o", str(out), *extra], env=env)
    assert r.exit_code == 0, r.output
    return PdfReader(out)


def _expected_numbers(score) -> list[str]:
    values = [score.toeplitzness_offdiag, score.null_mean_offdiag, score.null_std_offdiag, score.excess_offdiag,  # headline first
              score.toeplitzness, score.null_mean, score.null_std, score.excess]
    return [f"{round(v, 4) + 0.0:.4f}" for v in values]


@pytest.fixture(scope="module")
def minilm_report(minilm_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "minilm.pdf"
    return out, _report(out, str(minilm_dir))


def test_minilm_report_pages_sections_andpdf_outline(minilm_report, minilm_dir):
    path, reader = minilm_report
    texts = [page.extract_text() for page in reader.pages]
    # title, summary, one heatmap page, the heads of layer 0 and of all layers, methods (two pages)
    assert len(reader.pages) == 7
    outline = pdf_outline(reader)
    label = posviz.load_position_embeddings(str(minilm_dir)).model
    assert outline == [
        ("Title page", 0, 0),
        ("Summary", 0, 1),
        ("Position similarity P", 0, 2),
        (label, 1, 2),
        ("Per-head positional attention", 0, 3),
        (f"{label}: layer 0", 1, 3),
        (f"{label}: layer × head", 1, 4),
        ("Methods", 0, 5),
    ]
    for title, _, page in outline[1:]:
        # a path longer than its column is cut over several lines (after "/"): compare without whitespace
        assert re.sub(r"\s+", "", title) in re.sub(r"\s+", "", texts[page])
    # title page: models, source, date from SOURCE_DATE_EPOCH, version, contents with the right page numbers, conventions
    first = texts[0]
    assert "2023-11-14" in first and f"posviz {posviz.__version__}" in first
    assert "embeddings.position_embeddings.weight" in first and "path " in first
    for title, depth, page in outline[1:]:
        if depth == 0:
            assert re.search(rf"\d\s+{re.escape(title)}\s+page {page + 1}\b", first), title
    assert "Conventions" in first and "k = j − i" in first
    for i, text in enumerate(texts, start=1):
        assert f"page {i}" in text  # footer
    # methods: the definitions and both citations
    methods = "".join(texts[5:])
    for phrase in ("Toeplitz projection", "Null baseline", "excess", "k = j − i", "Rows kept", "arXiv:2106.01950", "arXiv:2006.15595"):
        assert phrase in methods, phrase


def test_summary_numbers_equal_the_api_and_the_dense_reference(minilm_report, minilm_dir):
    _, reader = minilm_report
    summary = reader.pages[1].extract_text()
    ms = posviz.score_model(str(minilm_dir))
    assert NUMBER.findall(summary) == _expected_numbers(ms.score)
    assert "512 × 384" in summary and "0–511" in summary
    full, offdiag = (dense_toeplitzness(ms.embeddings.matrix), dense_toeplitzness(ms.embeddings.matrix, True))
    assert f"{offdiag:.4f}" == NUMBER.findall(summary)[0] and f"{full:.4f}" == NUMBER.findall(summary)[4]
    assert f"{full:.4f}" == "0.4742"


def test_heatmap_page_embeds_p_itself(minilm_report, minilm_dir):
    """The map is P, one image pixel per entry, coloured with the stated clipped scale (not a screenshot)."""
    import matplotlib
    from matplotlib.colors import Normalize

    _, reader = minilm_report
    page = reader.pages[2]
    text = page.extract_text()
    images = [np.asarray(im.image) for im in page.images]
    maps = [a for a in images if a.shape[:2] == (512, 512)]
    assert len(maps) == 1
    e = posviz.load_position_embeddings(str(minilm_dir)).matrix
    p = e @ e.T
    lo, hi = np.percentile(p, [1, 99])
    assert f"{lo:.3g} to {hi:.3g}" in text
    expected = matplotlib.colormaps["hot"](Normalize(lo, hi, clip=True)(p))[..., :3] * 255
    # PDF image space runs bottom-up; the page's transform puts row 0 (query position 0) on top
    assert np.abs(maps[0][::-1, :, :3].astype(float) - expected).max() <= 1.01
    for phrase in ("diagonal profile", "offset k = j − i", "query position i", "key position j", "0.4742"):
        assert phrase in text


def test_pages_render_and_metadata(minilm_report, minilm_dir):
    path, reader = minilm_report
    doc = pdfium.PdfDocument(str(path))
    assert len(doc) == len(reader.pages)
    for page in doc:
        w, h = page.get_size()
        assert w > h  # A4 landscape
        img = np.asarray(page.render(scale=0.5).to_pil().convert("L"), dtype=float)
        assert img.std() > 10  # not blank
        assert (img < 128).mean() < 0.5  # not a black page
    heat = np.asarray(doc[2].render(scale=0.5).to_pil().convert("RGB"), dtype=float)
    assert (heat[..., 0] - heat[..., 2]).max() > 150  # the 'hot' colours are there
    doc.close()
    meta = reader.metadata
    label = posviz.load_position_embeddings(str(minilm_dir)).model
    assert meta.title == f"posviz report: {short_label(label, 40)}"  # long paths keep their end
    assert label in meta.subject and label in meta["/Keywords"]
    assert meta.creator == f"posviz {posviz.__version__}"
    assert meta["/CreationDate"] == "D:20231114221320Z"
    assert reader.page_mode == "/UseOutlines"


def test_source_date_epoch_gives_identical_bytes(tmp_path):
    a, b, c = tmp_path / "a.pdf", tmp_path / "b.pdf", tmp_path / "c.pdf"
    _report(a, "sinusoidal:96x16", "gaussian:80x8:3", extra=("--null-draws", "3"))
    _report(b, "sinusoidal:96x16", "gaussian:80x8:3", extra=("--null-draws", "3"))
    assert a.read_bytes() == b.read_bytes()
    _report(c, "sinusoidal:96x16", "gaussian:80x8:3", epoch="1800000000", extra=("--null-draws", "3"))
    assert c.read_bytes() != a.read_bytes()
    assert "2027-01-15" in PdfReader(c).pages[0].extract_text()


def test_two_models_side_by_side(tmp_path, minilm_dir, tiny_checkpoints):
    roberta = tiny_checkpoints("roberta")  # positions start at stored row 2
    out = tmp_path / "two.pdf"
    reader = _report(out, str(minilm_dir), str(roberta), extra=("--title", "MiniLM vs tiny RoBERTa"))
    sections = [t for t, d, _ in pdf_outline(reader) if d == 0]
    assert sections == ["Title page", "Summary", "Position similarity P", "Per-head positional attention", "Methods"]
    assert reader.metadata.title == "MiniLM vs tiny RoBERTa"
    summary = reader.pages[1].extract_text()
    numbers = NUMBER.findall(summary)
    scores = [posviz.score_model(str(m)).score for m in (minilm_dir, roberta)]
    assert numbers == _expected_numbers(scores[0]) + _expected_numbers(scores[1])
    assert "2–41" in summary  # RoBERTa's 40 positions are stored rows 2..41
    offdiag = dense_toeplitzness(posviz.load_position_embeddings(str(roberta)).matrix, True)
    assert numbers[8] == f"{round(offdiag, 4) + 0.0:.4f}"
    outline = pdf_outline(reader)
    children = [(t, p) for t, d, p in outline if d == 1]
    labels = [posviz.load_position_embeddings(str(m)).model for m in (minilm_dir, roberta)]
    # one heatmap page each, then each model's layer-0 head grid and its layer x head page
    assert children == [
        (labels[0], 2),
        (labels[1], 3),
        (f"{labels[0]}: layer 0", 4),
        (f"{labels[0]}: layer × head", 5),
        (f"{labels[1]}: layer 0", 6),
        (f"{labels[1]}: layer × head", 7),
    ]
    assert "rows 2-41 of 42" in reader.pages[3].extract_text()
    for label in labels:
        assert label in reader.metadata["/Keywords"]


def test_large_matrix_is_pooled_and_small(tmp_path):
    out = tmp_path / "big.pdf"
    reader = _report(out, "sinusoidal:4096x32", extra=("--null-draws", "1"))
    assert out.stat().st_size < 2_000_000
    page = reader.pages[2]
    shapes = [np.asarray(im.image).shape[:2] for im in page.images]
    assert (512, 512) in shapes and not any(s[0] > 1024 for s in shapes)
    assert "512² exact block means of 8 × 8 entries" in page.extract_text()


def test_model_without_positions_has_heads_but_no_heatmap(tmp_path, tiny_checkpoints):
    t5 = tiny_checkpoints("t5")
    out = tmp_path / "mixed.pdf"
    reader = _report(out, "sinusoidal:64x16", str(t5), extra=("--null-draws", "2"))
    outline = pdf_outline(reader)
    # P heatmap for the sinusoidal control only; per-head pages for T5 only (a control has no heads)
    assert [t for t, d, _ in outline if d == 1] == ["sinusoidal:64x16", f"{t5}: layer 0", f"{t5}: layer × head"]
    first, summary = reader.pages[0].extract_text(), reader.pages[1].extract_text()
    assert "no learned absolute position embeddings" in first
    assert "t5" in summary and "relative bucket bias" in summary
    # T5's bucket bias is exactly Toeplitz in every head
    grid = reader.pages[[p for t, d, p in outline if t == f"{t5}: layer 0"][0]].extract_text()
    assert re.findall(r"T=(\d\.\d+)", grid) == ["1.000"] * 4
    # alone, T5 still has its heads to report
    alone = tmp_path / "t5.pdf"
    r = runner.invoke(app, ["report", str(t5), "-o", str(alone)])
    assert r.exit_code == 0, r.output
    assert "Per-head positional attention" in [t for t, d, _ in pdf_outline(PdfReader(alone)) if d == 0]


@pytest.mark.parametrize(
    "target,fragment",
    [
        ("folder", "is a directory"),
        ("missing/out.pdf", "does not exist"),
        ("out.png", "unknown output extension"),
    ],
)
def test_bad_output_path_is_one_line_exit_2(tmp_path, monkeypatch, target, fragment):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "folder").mkdir()
    r = runner.invoke(app, ["report", "sinusoidal:32x8", "-o", target])
    assert r.exit_code == 2, r.output
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0]
    assert "Traceback" not in r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder"]
    assert list((tmp_path / "folder").iterdir()) == []


def test_bad_model_keeps_existing_report(tmp_path):
    out = tmp_path / "keep.pdf"
    out.write_bytes(b"%PDF old report")
    r = runner.invoke(app, ["report", "sinusoidal:32x8", "./no/such/model", "-o", str(out)])
    assert r.exit_code == 2 and "no such file or folder" in r.output
    assert out.read_bytes() == b"%PDF old report"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.pdf"]


def test_failing_section_leaves_no_partial_file(tmp_path):
    from posviz.report import Section, build_context, render_report
    from posviz.report.sections import sections as all_sections

    def broken(ctx):
        raise RuntimeError("section failed mid-report")

    out = tmp_path / "r.pdf"
    out.write_bytes(b"%PDF old report")
    ctx = build_context(["sinusoidal:64x8"])
    every = all_sections()
    sections = [*every[:2], Section("broken", "Broken", broken), *every[2:]]
    with pytest.raises(RuntimeError, match="mid-report"):
        render_report(ctx, out, sections)
    assert out.read_bytes() == b"%PDF old report"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.pdf"]


#: ``posviz`` with Ctrl-C planted inside rendering: the process sends itself SIGINT right after the PDF's
#: second page is written, a fixed point of the run with more pages to come (no race with a timer).
_INTERRUPTED_RENDERING = """
import os, signal, sys
from matplotlib.backends.backend_pdf import PdfPages

save, pages = PdfPages.savefig, []

def savefig(self, *args, **kwargs):
    save(self, *args, **kwargs)
    pages.append(self)
    if len(pages) == 2:
        folder = os.path.dirname(os.path.abspath(sys.argv[sys.argv.index("-o") + 1]))
        print(*sorted(os.listdir(folder)), flush=True)
        os.kill(os.getpid(), signal.SIGINT)

PdfPages.savefig = savefig
from posviz.cli.app import main
sys.argv = ["posviz", *sys.argv[1:]]
main()
"""


def test_sigint_during_rendering_leaves_no_partial_file(tmp_path, minilm_dir):
    """Ctrl-C while pages are being written: exit 130, the old report intact, no temporary file left."""
    old = b"%PDF old report"
    out = tmp_path / "report.pdf"
    out.write_bytes(old)
    args = [sys.executable, "-c", _INTERRUPTED_RENDERING, "report", str(minilm_dir), "sinusoidal:64x8", "-o", str(out)]
    # Ctrl-C as at a terminal: a test run started in the background (`make test &`, some CI launchers) has SIGINT
    # ignored, and an ignored signal is inherited, so the child gets the default disposition explicitly
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    # at the interruption: the old report and the temporary file being rendered into
    assert re.fullmatch(r"\.report\.pdf\.\S+\.tmp report\.pdf", proc.stdout.strip()), proc.stdout
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "error: interrupted; no output was written" and "Traceback" not in proc.stderr
    assert out.read_bytes() == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.pdf"]


def test_python_api(tmp_path):
    out = posviz.build_report(["sinusoidal:48x8"], tmp_path / "api.pdf", null_draws=2, title="API")
    reader = PdfReader(io.BytesIO(out.read_bytes()))
    assert reader.metadata.title == "API" and len(reader.pages) == 5  # title, summary, P, methods (2 pages)


def test_hub_model_source_names_the_commit(tmp_path, hf_cache, tiny_checkpoints):
    commit = hf_cache("some-org/tiny-bert", tiny_checkpoints("bert"))
    out = tmp_path / "hub.pdf"
    reader = _report(out, "some-org/tiny-bert", extra=("--null-draws", "2"))
    first = reader.pages[0].extract_text()
    assert "some-org/tiny-bert" in first
    # the source cell wraps; the hub id and the full commit hash are both there
    assert f"hub some-org/tiny-bert@{commit}" in re.sub(r"/\s+", "/", first)
    assert reader.metadata["/Keywords"].startswith("some-org/tiny-bert, ")


def test_heads_section_numbers_equal_the_heads_api(tmp_path, minilm_dir):
    from posviz.extract.registry import open_heads

    out = tmp_path / "heads.pdf"
    reader = _report(out, str(minilm_dir), extra=("--layers", "0,5", "--null-draws", "2"))
    outline = pdf_outline(reader)
    label = posviz.load_position_embeddings(str(minilm_dir)).model
    pages = {t: p for t, d, p in outline}
    assert [t for t, d, _ in outline if d == 1 and t.startswith(label + ":")] == [f"{label}: layer 0", f"{label}: layer 5", f"{label}: layer × head"]
    heads = open_heads(str(minilm_dir))
    for layer in (0, 5):
        text = reader.pages[pages[f"{label}: layer {layer}"]].extract_text()
        _, scores = heads.score(layer)
        assert re.findall(r"T=(\d\.\d+)", text) == [f"{t:.3f}" for t in scores.toeplitzness_offdiag]
        flat = re.sub(r"\s+", " ", text)
        assert "Conventions: input LN(E_P); LayerNorm embeddings.LayerNorm; Q/K biases on; scale 1/sqrt(32)" in flat
    matrix = reader.pages[pages[f"{label}: layer × head"]].extract_text()
    grid = [f"{t:.2f}" for layer in range(6) for t in heads.score(layer)[1].toeplitzness_offdiag]
    assert re.findall(r"\b\d\.\d\d\b", matrix)[: len(grid)] == grid  # the annotated Toeplitzness panel, row by row
    methods = "".join(p.extract_text() for p in reader.pages[pages["Methods"] :])
    assert "Per-head positional attention" in methods and "exact mean of its Toeplitzness over all row permutations" in re.sub(r"\s+", " ", methods)


def test_heads_section_bad_layers(tmp_path, minilm_dir):
    out = tmp_path / "bad.pdf"
    r = runner.invoke(app, ["report", str(minilm_dir), "--layers", "9", "-o", str(out)])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1 and r.output.startswith("error: ")
    assert "9" in r.output and not out.exists()
