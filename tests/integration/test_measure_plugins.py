"""Measures from other packages (the ``posviz.measures`` entry-point group), through a real distribution: the worked
example ``examples/posviz-norms`` laid out as pip installs it (its module and a ``.dist-info`` with its entry
points) on ``sys.path``, then listed, named in the help and run along a checkpoint series by posviz, unchanged."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from posviz.cli.app import app
from posviz.measures.builtin import BUILT_IN_NAMES
from tests.distributions import install as _install

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "posviz-norms"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    site = tmp_path_factory.mktemp("site-packages")
    _install(site, "posviz-norms", "[posviz.measures]\ntable-norm = posviz_norms:MEASURE\n"
             "adjacent-cosine = posviz_norms.adjacent:TEXT_MEASURE\n", EXAMPLE / "posviz_norms")
    return site


@pytest.fixture(scope="module")
def bad_site(tmp_path_factory) -> Path:
    """A plugin whose module does not exist, and one that claims a name of posviz's own."""
    site = tmp_path_factory.mktemp("bad-site-packages")
    _install(site, "posviz-broken", "[posviz.measures]\nbroken = posviz_broken_measure:MEASURE\n")
    _install(site, "posviz-clash", "[posviz.measures]\ntoeplitzness = posviz_norms:MEASURE\n")
    return site


@pytest.fixture(scope="module")
def series(tmp_path_factory) -> list[Path]:
    """Two checkpoints of a tiny BERT, named by their step (different random weights)."""
    import torch
    from transformers import BertConfig, BertModel

    root = tmp_path_factory.mktemp("series")
    out = []
    for step in (100, 200):
        torch.manual_seed(step)
        config = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                            max_position_embeddings=40)
        folder = root / f"tiny-bert-step_{step}"
        BertModel(config).save_pretrained(folder, safe_serialization=True)
        out.append(folder)
    return out


def cli(*args: str):
    return CliRunner().invoke(app, list(args))


def test_the_registry_lists_a_plugin_in_a_fresh_interpreter(site):
    env = {**os.environ, "PYTHONPATH": str(site)}
    code = "import importlib.metadata as m; print(sorted(e.name for e in m.entry_points(group='posviz.measures')))"
    names = set(eval(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout))
    assert "table-norm" in names and set(BUILT_IN_NAMES) <= names  # posviz declares its own measures there too
    help_text = subprocess.run([sys.executable, "-m", "posviz", "--help"], env={**env, "COLUMNS": "200"}, capture_output=True,
                               text=True, check=True).stdout
    listed = re.search(r"Measures: ([a-z, -]+) \(", " ".join(help_text.split()))
    assert listed, help_text
    shown = listed.group(1).split(", ")  # posviz's own first, then every other in name order, the plugin's among them
    assert shown[: len(BUILT_IN_NAMES)] == list(BUILT_IN_NAMES) and {"adjacent-cosine", "table-norm", "state-norms"} <= set(shown)
    assert shown[len(BUILT_IN_NAMES):] == sorted(shown[len(BUILT_IN_NAMES):])


def test_a_plugin_measure_is_listed(site, monkeypatch):
    monkeypatch.syspath_prepend(str(site))
    res = cli("measures", "--format", "json")
    assert res.exit_code == 0, res.output
    rows = {r["name"]: r for r in json.loads(res.stdout)}
    assert list(rows)[: len(BUILT_IN_NAMES)] == list(BUILT_IN_NAMES)
    assert rows["table-norm"] | {"summary": None} == {"name": "table-norm", "needs": "weights", "reads": "position table",
                                                      "trajectory": True, "text_pass": False, "command": "posviz measure table-norm",
                                                      "origin": "posviz-norms", "summary": None}
    assert rows["heads"]["trajectory"] is False and rows["attention"]["needs"] == "text"
    assert rows["state-norms"]["text_pass"] and rows["state-norms"]["command"] == "posviz measure state-norms"


def test_a_plugin_measure_runs_along_a_series(site, series, monkeypatch, tmp_path):
    from safetensors.numpy import load_file

    monkeypatch.syspath_prepend(str(site))
    res = cli("trajectory", *map(str, reversed(series)), "--measure", "table-norm", "--format", "json")
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    assert [r["step"] for r in rows] == [100, 200]  # sorted by step
    for row, folder in zip(rows, series, strict=True):  # against the norms computed here from the saved tensor
        e = load_file(str(folder / "model.safetensors"))["embeddings.position_embeddings.weight"].astype(np.float64)
        norms = np.linalg.norm(e, axis=1)
        assert row["mean_norm"] == pytest.approx(norms.mean(), rel=1e-6) and row["max_norm"] == pytest.approx(norms.max(), rel=1e-6)
        assert row["far_to_near"] == pytest.approx(norms[-4:].mean() / norms[:4].mean(), rel=1e-6)
        assert row["duplicate_of"] is None and "suspect" in row  # posviz's series checks ran on it
    res = cli("trajectory", *map(str, series), "--measure", "table-norm", "-o", str(tmp_path / "n.txt"), "-o", str(tmp_path / "n.png"))
    assert res.exit_code == 0, res.output
    table = (tmp_path / "n.txt").read_text()
    assert "mean norm" in table and "far / near" in table and "from posviz-norms" in table
    assert (tmp_path / "n.png").stat().st_size > 10_000


def test_options_a_measure_does_not_use_are_refused(site, series, monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(site))
    res = cli("trajectory", str(series[0]), "--measure", "table-norm", "--layers", "0", "-o", str(tmp_path / "x.json"))
    assert res.exit_code == 2 and not (tmp_path / "x.json").exists()
    assert res.output.strip() == ("error: --layers does not apply to --measure table-norm: an option of --measure attention and "
                                  "bands and hidden (hint: --measure table-norm takes --positions)")
    res = cli("trajectory", str(series[0]), "--measure", "nope")
    assert res.exit_code == 2 and "unknown measure 'nope'" in res.output and "table-norm" in res.output
    res = cli("trajectory", str(series[0]), "--measure", "heads")
    assert res.exit_code == 2 and "measure 'heads' has no series along checkpoints (it is posviz heads)" in res.output


def test_a_broken_or_clashing_plugin_is_one_line(bad_site, series, monkeypatch):
    monkeypatch.syspath_prepend(str(bad_site))
    res = cli("trajectory", str(series[0]), "--measure", "broken")
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1
    assert "measure 'broken' (posviz-broken, posviz_broken_measure:MEASURE) failed to import: ModuleNotFoundError" in res.output
    res = cli("trajectory", str(series[0]), "--measure", "toeplitzness")
    assert res.exit_code == 2 and "posviz-clash registers a measure called 'toeplitzness', a name of posviz's own" in res.output
    res = cli("measures")
    assert res.exit_code == 2 and res.output.startswith("error: ")


def test_a_plugin_measure_on_text_joins_the_pass_in_every_front_end(site, monkeypatch, minilm_dir, absolute_run, train_corpus,
                                                                     tmp_path):
    """The plugin's ``adjacent-cosine``, unchanged posviz: on the same pass as attention along a series (one load per
    checkpoint), a report page and an explorer tab; its numbers against cosines computed here from transformers' own
    hidden states."""
    import torch
    from pypdf import PdfReader
    from transformers import AutoModel

    import posviz
    import posviz.observe.loading as loading

    monkeypatch.syspath_prepend(str(site))
    loads = []
    real = loading.load_model
    monkeypatch.setattr(loading, "load_model", lambda *a, **k: loads.append(a[0]) or real(*a, **k))
    both = posviz.trajectory(str(absolute_run), measure="attention,adjacent-cosine", corpus=str(train_corpus), seq_len=32,
                             max_blocks=4)
    assert len(loads) == len(both["adjacent-cosine"].rows) == len(both["attention"].rows) >= 2
    assert all(-1 <= r["cos_1"] <= 1 and r["duplicate_of"] is None for r in both["adjacent-cosine"].rows)

    from posviz.measures import SeriesOptions, get_measure
    from posviz.observe.text_pass import observe_text

    ids = np.random.default_rng(1).integers(1000, 20000, size=(3, 20))
    measure = get_measure("adjacent-cosine")
    result = observe_text(str(minilm_dir), [measure.load("request")(SeriesOptions())], token_blocks=ids)["adjacent-cosine"]
    with torch.inference_mode():
        states = AutoModel.from_pretrained(minilm_dir).eval()(torch.as_tensor(ids), output_hidden_states=True,
                                                              attention_mask=torch.ones(ids.shape, dtype=torch.long)).hidden_states
    last = torch.nn.functional.normalize(states[-1].double(), dim=-1)
    assert measure.origin == "posviz-norms"
    assert measure.load("values")(result)["cos_1"] == pytest.approx(float((last[:, :-1] * last[:, 1:]).sum(-1).mean()), rel=1e-6)

    out = tmp_path / "r.pdf"
    res = cli("report", str(minilm_dir), "--no-albert", "--corpus", str(train_corpus), "--attention-seq-len", "32",
              "--attention-max-blocks", "4", "--measure", "adjacent-cosine", "--html", "-o", str(out))
    assert res.exit_code == 0, res.output
    text = " ".join(" ".join(p.extract_text() for p in PdfReader(out).pages).split())
    assert "adjacent-cosine" in text and "cos(i, i+1)" in text and "from posviz-norms" in text
    from tests.integration.test_explore import page_data

    tab = page_data(out.with_suffix(".html").read_text(encoding="utf-8"))["models"][0]["corpus"]["measures"]["adjacent-cosine"]
    assert tab["origin"] == "posviz-norms" and len(tab["records"]) == 7


def test_posviz_measure_runs_a_plugin_measure_on_one_model(site, monkeypatch, minilm_dir, train_corpus, tmp_path):
    """``posviz measure NAME MODEL``: the plugin's text measure on one model, its records equal to one pass of the
    library (the same request, corpus and blocks), as JSON and as a table."""
    from posviz.measures import SeriesOptions, get_measure
    from posviz.observe.text_pass import observe_text

    monkeypatch.syspath_prepend(str(site))
    out = tmp_path / "adjacent.json"
    res = cli("measure", "adjacent-cosine", str(minilm_dir), "--corpus", str(train_corpus), "--seq-len", "32",
              "--max-blocks", "4", "-o", str(out))
    assert res.exit_code == 0, res.output
    records = json.loads(out.read_text())
    result = observe_text(str(minilm_dir), [get_measure("adjacent-cosine").load("request")(SeriesOptions())],
                          corpus=str(train_corpus), seq_len=32, max_blocks=4)["adjacent-cosine"]
    assert [r["layer"] for r in records] == list(range(7))
    assert [r["cos_1"] for r in records] == pytest.approx([r["cos_1"] for r in result.records()], rel=1e-12)
    table = cli("measure", "adjacent-cosine", str(minilm_dir), "--corpus", str(train_corpus), "--seq-len", "32",
                "--max-blocks", "4")
    assert table.exit_code == 0 and "adjacent-cosine: Cosine between" in table.output and "from posviz-norms" in table.output
    assert len([line for line in table.output.splitlines() if line.split()[:1] in (["0"], ["6"])]) == 2


SECTION_PLUGIN = '''
from posviz.measures import Measure
from posviz.report.section import Section


def build(ctx):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8.27, 11.69))
    fig.text(0.1, 0.5, "Weight norms of " + ", ".join(item.label for item in ctx.items))
    return [fig]


def point(source, options):
    return {"norm": 1.0}


SECTION = Section("weight-norms", "Weight norms (a section of another package)", build)
MEASURE = Measure("weight-norms", "A plugin's measure with a report section of its own", needs="weights",
                  point="posviz_section:point", columns=(("norm", "norm"),), report="posviz_section:SECTION")
'''


def test_a_plugin_measure_brings_its_own_report_section(minilm_dir, monkeypatch, tmp_path):
    """A measure's ``report`` part is a section of the report, in registry order (after posviz's measures, before the
    methods page), with no change to posviz."""
    from pypdf import PdfReader

    package = tmp_path / "src" / "posviz_section"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(SECTION_PLUGIN)
    site = tmp_path / "site"
    _install(site, "posviz-section", "[posviz.measures]\nweight-norms = posviz_section:MEASURE\n", package)
    monkeypatch.syspath_prepend(str(site))
    out = tmp_path / "r.pdf"
    res = cli("report", str(minilm_dir), "--no-albert", "-o", str(out))
    assert res.exit_code == 0, res.output
    reader = PdfReader(out)
    titles = [item.title for item in reader.outline if not isinstance(item, list)]
    assert titles.index("Weight norms (a section of another package)") == titles.index("Methods") - 1
    assert titles.index("Weight norms (a section of another package)") > titles.index("Per-head positional attention")
    assert "Weight norms of" in " ".join(page.extract_text() for page in reader.pages)
