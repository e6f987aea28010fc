"""The heatmap and toeplitzness commands, through Typer's runner and as processes."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys

import pytest
from matplotlib.image import imread
from typer.testing import CliRunner

from posviz.cli.app import app
from tests.reference import assert_close

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args))


def test_version_and_help():
    from posviz import __version__

    r = invoke("--version")
    assert r.exit_code == 0 and r.output.strip() == f"posviz {__version__}"
    r = invoke("--help")
    assert r.exit_code == 0 and "heatmap" in r.output and "toeplitzness" in r.output


def test_toeplitzness_json_minilm(minilm_dir):
    r = invoke("toeplitzness", str(minilm_dir), "--format", "json", "--null-draws", "3")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert len(rows) == 1
    row = rows[0]
    for key in ("model", "positions", "dim", "rows", "toeplitzness", "toeplitzness_offdiag", "null_mean", "excess"):
        assert key in row
    assert row["toeplitzness"] == pytest.approx(0.474, abs=0.001)
    assert (row["positions"], row["dim"], row["rows"]) == (512, 384, [0, 512])
    assert row["null_draws"] == 3 and row["variant"] == "exclude_diagonal" and row["headline"] == "toeplitzness_offdiag"


def test_toeplitzness_table_and_csv_several_models(tmp_path):
    r = invoke("toeplitzness", "sinusoidal:128x64", "gaussian:128x64:1", "--null-draws", "2")
    assert r.exit_code == 0, r.output
    assert "sinusoidal:128x64" in r.stdout and "gaussian:128x64:1" in r.stdout
    assert "variant: off-diagonal" in r.stdout and "1.0000" in r.stdout
    out = tmp_path / "scores.csv"
    r = invoke("toeplitzness", "sinusoidal:128x64", "gaussian:128x64:1", "-f", "csv", "-o", str(out), "--exclude-diagonal")
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert [x["model"] for x in rows] == ["sinusoidal:128x64", "gaussian:128x64:1"]
    assert float(rows[0]["toeplitzness_offdiag"]) > 0.999
    assert rows[0]["variant"] == "exclude_diagonal"


def test_seed_makes_null_reproducible():
    a = json.loads(invoke("toeplitzness", "gaussian:64x8", "-f", "json", "--seed", "4").stdout)[0]
    b = json.loads(invoke("toeplitzness", "gaussian:64x8", "-f", "json", "--seed", "4").stdout)[0]
    c = json.loads(invoke("toeplitzness", "gaussian:64x8", "-f", "json", "--seed", "5").stdout)[0]
    assert a["null_std"] == b["null_std"] != c["null_std"]  # the sd is sampled; the mean is exact
    assert a["null_mean"] == c["null_mean"]


@pytest.mark.parametrize("ext", ["png", "pdf", "svg"])
def test_heatmap_formats(tmp_path, minilm_dir, ext):
    out = tmp_path / f"p.{ext}"
    r = invoke("heatmap", str(minilm_dir), "-o", str(out), "--positions", "0:256")
    assert r.exit_code == 0, r.output
    data = out.read_bytes()
    assert data.startswith({"png": b"\x89PNG", "pdf": b"%PDF", "svg": b"<?xml"}[ext])
    if ext == "png":
        img = imread(out)
        assert img.shape[0] > 300 and img.shape[1] > 300
        assert img[..., :3].std() > 0.05  # not blank


def test_heatmap_grid_of_several_models(tmp_path):
    out = tmp_path / "grid.png"
    r = invoke("heatmap", "sinusoidal:64x32", "gaussian:64x32", "sinusoidal:32x16", "--shared-scale", "-o", str(out))
    assert r.exit_code == 0, r.output
    img = imread(out)
    assert img.shape[1] > 2.5 * img.shape[0]  # three panels side by side


def test_heatmap_large_matrix_is_pooled(tmp_path):
    out = tmp_path / "big.png"
    r = invoke("heatmap", "sinusoidal:4096x64", "--max-pixels", "256", "-o", str(out))
    assert r.exit_code == 0, r.output
    assert out.stat().st_size < 2_000_000


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["heatmap", "./no/such/model"], "no such file or folder"),
        (["heatmap", "sinusoidal:64x8", "-o", "out.txt"], "unknown output extension"),
        (["heatmap", "sinusoidal:64x8", "--positions", "10:5"], "out of range or empty"),
        (["heatmap", "sinusoidal:64x8", "--cmap", "nope"], "unknown colormap"),
        (["toeplitzness", "sinusoidal:64x8", "--positions", "0:1"], "at least 2 positions"),
        (["toeplitzness", "sinusoidal:64x8", "-f", "json", "-o", "x.csv"], "unknown output extension"),
        (["toeplitzness", "sinusoidal:64x8", "--normalize", "bogus"], "Invalid value"),
        (["toeplitzness"], "give at least one MODEL"),
    ],
)
def test_bad_input_is_one_line_exit_2(tmp_path, args, fragment):
    os.chdir(tmp_path)
    r = invoke(*args)
    assert r.exit_code == 2, r.output
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0]
    assert "Traceback" not in r.output
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_existing_output_survives_a_failed_run(tmp_path):
    out = tmp_path / "keep.png"
    out.write_bytes(b"old")
    r = invoke("heatmap", "./missing", "-o", str(out))
    assert r.exit_code == 2
    assert out.read_bytes() == b"old"


def _run(*args, env=None, timeout=60):
    return subprocess.run([sys.executable, "-m", "posviz", *args], capture_output=True, text=True, env=env, timeout=timeout)


def test_module_entry_point_and_console_script(tmp_path):
    r = _run("toeplitzness", "sinusoidal:32x8", "-f", "json", "--null-draws", "0")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)[0]["toeplitzness"] == pytest.approx(1.0)
    exe = os.path.join(os.path.dirname(sys.executable), "posviz")
    r = subprocess.run([exe, "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("posviz ")


def test_unreachable_hub_fails_fast_with_one_line(tmp_path):
    env = dict(os.environ)
    env.pop("HF_HUB_OFFLINE", None)
    env.update(HF_HUB_CACHE=str(tmp_path / "cache"), HF_ENDPOINT="http://127.0.0.1:9")  # nothing listens on port 9
    r = _run("toeplitzness", "some-org/some-model", env=env)  # no timing assert: loaded CI machines vary 10x
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "some-org/some-model" in lines[0] and "cannot be reached" in lines[0]
    assert "local path" in lines[0]


def test_offline_mode_message(tmp_path):
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(tmp_path / "cache"))
    r = _run("heatmap", "albert-base-v2", env=env)
    assert r.returncode == 2
    assert r.stderr.strip() == (
        "error: albert-base-v2: not a local path and not in the local Hugging Face cache and HF_HUB_OFFLINE is set "
        "(hint: run once online to fill the Hugging Face cache, or pass a local path)"
    )


def test_debug_flag_shows_traceback(tmp_path):
    r = _run("--debug", "heatmap", "./missing-model")
    assert r.returncode != 0 and "Traceback" in r.stderr and "SourceError" in r.stderr


def test_heatmap_api_returns_figure():
    import posviz

    pe = posviz.load_position_embeddings("sinusoidal:64x16")
    fig = posviz.plot_heatmap(pe)
    assert len(fig.axes) == 3  # map, colourbar, profile
    img = fig.axes[0].images[0].get_array()
    assert_close(img, pe.matrix @ pe.matrix.T, rtol=1e-7)
