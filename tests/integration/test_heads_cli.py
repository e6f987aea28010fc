"""``posviz heads`` end to end: real checkpoints, real figures read back, real processes."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys

import numpy as np
import pytest
from matplotlib.image import imread
from typer.testing import CliRunner

from posviz.cli.app import app
from tests.checkpoint_factory import attention_scaling

runner = CliRunner()
MINILM = "sentence-transformers/all-MiniLM-L6-v2"


def invoke(*args: str):
    return runner.invoke(app, ["heads", *map(str, args)])


def test_minilm_layer0_grid_figure_and_scores(tmp_path):
    fig = tmp_path / "minilm-heads.png"
    r = invoke(MINILM, "--layer", "0", "-o", fig)
    assert r.exit_code == 0, r.output
    img = imread(fig)
    assert img.shape[0] > 1000 and img.shape[1] > 1000 and img[..., :3].std() > 0.05
    table = r.stdout
    lines = [ln for ln in table.splitlines() if ln.strip()[:2].strip().isdigit() and "│" in ln]
    assert len(lines) == 12  # one row per head
    assert "Conventions: input LN(E_P); LayerNorm embeddings.LayerNorm; Q/K biases on; scale 1/sqrt(32)" in table
    assert "exact mean over all row permutations" in table


def test_minilm_scores_equal_dense_computation_through_hf_bert(minilm_dir):
    torch = pytest.importorskip("torch")
    from transformers import AutoModel

    r = invoke(minilm_dir, "--format", "json")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert [x["head"] for x in rows] == list(range(12)) and {x["layer"] for x in rows} == {0}
    assert all(x["ln"] == "ln" and x["bias"] is True and x["scale_rule"] == "1/sqrt(32)" for x in rows)
    assert rows[0]["layer_norms"] == ["embeddings.LayerNorm.weight", "embeddings.LayerNorm.bias"]
    model = AutoModel.from_pretrained(minilm_dir, attn_implementation="eager").double().eval()
    att = model.encoder.layer[0].attention.self
    with torch.no_grad():
        x = model.embeddings.LayerNorm(model.embeddings.position_embeddings.weight)
        q, k = att.query(x).reshape(512, 12, 32), att.key(x).reshape(512, 12, 32)
    for h in (0, 2, 11):
        a = (q[:, h] @ k[:, h].T).numpy() * attention_scaling(att)
        i, j = np.indices(a.shape)
        means = np.bincount((j - i + 511).ravel(), weights=a.ravel()) / (512 - np.abs(np.arange(-511, 512)))
        resid = np.sum((a - means[j - i + 511]) ** 2)
        assert rows[h]["toeplitzness"] == pytest.approx(1 - resid / np.sum((a - a.mean()) ** 2), rel=1e-9, abs=1e-9)


def test_minilm_pdf_title_states_the_conventions(tmp_path):
    pypdf = pytest.importorskip("pypdf")
    out = tmp_path / "heads.pdf"
    r = invoke(MINILM, "-o", out, "--ln", "ln+type0", "--no-bias", "--positions", "0:128", "--own-scale")
    assert r.exit_code == 0, r.output
    text = " ".join(page.extract_text() for page in pypdf.PdfReader(out).pages)
    for fragment in ("LN(E_P + token_type[0])", "Q/K biases off", "scale 1/sqrt(32)", "layer 0", "rows 0-127 of 512",
                     "own colour scales"):
        assert fragment in text


def test_all_layers_json_csv_table_and_matrix_figure(tiny_checkpoints, tmp_path):
    bert = tiny_checkpoints("bert")
    fig = tmp_path / "matrix.png"
    r = invoke(bert, "--layers", "all", "-o", fig, "-o", tmp_path / "scores.json", "-o", tmp_path / "scores.csv")
    assert r.exit_code == 0, r.output
    assert imread(fig).shape[2] in (3, 4)
    rows = json.loads((tmp_path / "scores.json").read_text())
    assert [(x["layer"], x["head"]) for x in rows] == [(lay, h) for lay in range(2) for h in range(4)]
    assert all(0.0 <= x["toeplitzness"] <= 1.0 and x["null_mean"] < x["toeplitzness"] + 1 for x in rows)
    parsed = list(csv.DictReader(io.StringIO((tmp_path / "scores.csv").read_text())))
    assert len(parsed) == 8 and float(parsed[5]["toeplitzness"]) == pytest.approx(rows[5]["toeplitzness"])
    assert r.stdout == ""  # the scores went to the files
    t = invoke(bert, "--layers", "0-1")
    assert t.exit_code == 0 and "h3" in t.stdout and "mean" in t.stdout
    assert "Toeplitzness R² per layer (rows) and head (columns)" in t.stdout


def test_relative_schemes_through_the_cli(tiny_checkpoints, tmp_path):
    r = invoke(tiny_checkpoints("t5"), "--layers", "all", "--format", "json", "--positions", "0:40")
    rows = json.loads(r.stdout)
    assert r.exit_code == 0 and len(rows) == 8
    assert all(x["toeplitzness"] == 1.0 and x["null_mean"] is None for x in rows)
    out = tmp_path / "bloom.pdf"
    r = invoke(tiny_checkpoints("bloom"), "-o", out, "--positions", "0:64", "--profiles", "-f", "json")
    assert r.exit_code == 0 and out.read_bytes().startswith(b"%PDF")
    rows = json.loads(r.stdout)
    assert len(rows[0]["profile"]) == 127 and rows[0]["causal"] is True


def test_as_a_process(tiny_checkpoints):
    gpt2 = str(tiny_checkpoints("gpt2"))
    ok = subprocess.run([sys.executable, "-m", "posviz", "heads", gpt2, "--layers", "all", "-f", "json"],
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    rows = json.loads(ok.stdout)
    assert len(rows) == 8 and rows[0]["layer_norms"] == ["h.0.ln_1.weight", "h.0.ln_1.bias"]
    assert rows[4]["layer_norms"] == ["h.1.ln_1.weight", "h.1.ln_1.bias"]
    bad = subprocess.run([sys.executable, "-m", "posviz", "heads", gpt2, "--layer", "7"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.strip().splitlines() == [f"error: --layer 7 is out of range: {gpt2} has 2 layers (0-1)"]


BAD = [
    (["--layer", "2"], "bert", "--layer 2 is out of range"),
    (["--layer", "-1"], "bert", "--layer -1 is out of range"),
    (["--layers", "0-5"], "bert", "--layers 0-5: layer 2 is out of range"),
    (["--layers", "first"], "bert", "is not 'all' or a list"),
    (["--layers", "1-0"], "bert", "is empty"),
    (["--layer", "0", "--layers", "all"], "bert", "either --layer or --layers"),
    (["--ln", "ln+type0"], "gpt2", "no token-type embeddings"),
    (["--ln", "bogus"], "bert", "Invalid value"),
    (["--positions", "9:3"], "bert", "out of range or empty"),
    (["--table", "encoder"], "llama", "--table does not apply"),
    (["--cmap", "nope"], "bert", "unknown colormap"),
    (["-o", "{tmp}/out.xyz"], "bert", "unknown output extension"),
    (["-o", "{tmp}"], "bert", "is a directory"),
    (["-o", "{tmp}/missing/out.png"], "bert", "does not exist"),
]


@pytest.mark.parametrize("args,model,fragment", BAD, ids=[" ".join(a[0]) for a in BAD])
def test_bad_input_one_line_exit_2_nothing_written(tiny_checkpoints, tmp_path, args, model, fragment):
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    out = tmp_path / "heads.png"
    cli_args = [tiny_checkpoints(model), *args]
    if "-o" not in args:
        cli_args += ["-o", out]
    r = invoke(*cli_args)
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], lines
    assert "Traceback" not in r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("model", ["sinusoidal:64x16", "ctrl"])
def test_models_without_heads_are_refused(tmp_path, model):
    if model == "ctrl":
        from transformers import AutoConfig

        folder = tmp_path / "ctrl"
        folder.mkdir()
        AutoConfig.for_model("ctrl", n_layer=1).save_pretrained(folder)
        (folder / "model.safetensors").write_bytes(b"")
        model = str(folder)
    r = invoke(model, "-o", tmp_path / "x.png")
    assert r.exit_code == 2 and r.stderr.startswith("error: ") and "Traceback" not in r.output
    assert not (tmp_path / "x.png").exists()


def test_a_failed_run_leaves_the_previous_figure(tiny_checkpoints, tmp_path):
    out = tmp_path / "heads.png"
    assert invoke(tiny_checkpoints("albert"), "-o", out).exit_code == 0
    before = out.read_bytes()
    r = invoke(tiny_checkpoints("albert"), "--layer", "5", "-o", out)
    assert r.exit_code == 2 and out.read_bytes() == before


def test_nan_in_a_query_weight_names_the_tensor_and_rows(tmp_path):
    from tests.checkpoint_factory import build_tiny_checkpoint

    w = np.random.default_rng(0).normal(size=(32, 32))
    w[[3, 17], 5] = np.nan
    folder = build_tiny_checkpoint("bert", tmp_path / "bert", plant={"encoder.layer.1.attention.self.query.weight": w})
    assert invoke(folder, "--layer", "0").exit_code == 0  # only layer 1's tensors are bad, and only they are read
    r = invoke(folder, "--layer", "1", "-o", tmp_path / "x.png")
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "encoder.layer.1.attention.self.query.weight contains NaN or Inf in 2 row(s): 3, 17" in r.stderr
    assert not (tmp_path / "x.png").exists()
