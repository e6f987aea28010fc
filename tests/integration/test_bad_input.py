"""Bad input never crashes: one ``error:`` line, exit code 2, nothing written.

One parametrised test per row of the table below. Each case builds its input in
a fresh folder, runs the CLI there with ``-o`` pointing into that folder, and
checks the message fragment, the exit code, the absence of a traceback and that
no file appeared.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from posviz.cli.app import app
from tests.checkpoint_factory import build_tiny_checkpoint

runner = CliRunner()


@pytest.fixture(scope="module")
def bert(tmp_path_factory) -> Path:
    return build_tiny_checkpoint("bert", tmp_path_factory.mktemp("bert") / "m")


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _header(folder: Path) -> tuple[dict, bytes]:
    data = (folder / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8 : 8 + n]), data[8 + n :]


def _write_header(folder: Path, header: dict, body: bytes) -> None:
    hb = json.dumps(header).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(hb)) + hb + body)


def _edit_tensor(field: str, value) -> Callable:
    def make(bert: Path, tmp: Path) -> Path:
        m = _copy(bert, tmp / "m")
        header, body = _header(m)
        header["embeddings.position_embeddings.weight"][field] = value
        _write_header(m, header, body)
        return m

    return make


def _overlapping(bert: Path, tmp: Path) -> Path:
    m = _copy(bert, tmp / "m")
    header, body = _header(m)
    names = [k for k in header if k != "__metadata__"]
    header[names[1]]["data_offsets"] = header[names[0]]["data_offsets"]
    _write_header(m, header, body)
    return m


def _bytes(mutate: Callable[[bytes], bytes]) -> Callable:
    def make(bert: Path, tmp: Path) -> Path:
        m = _copy(bert, tmp / "m")
        p = m / "model.safetensors"
        p.write_bytes(mutate(p.read_bytes()))
        return m

    return make


def _config(edit: Callable[[dict], dict | str]) -> Callable:
    def make(bert: Path, tmp: Path) -> Path:
        m = _copy(bert, tmp / "m")
        cfg = json.loads((m / "config.json").read_text())
        new = edit(cfg)
        (m / "config.json").write_text(new if isinstance(new, str) else json.dumps(new))
        return m

    return make


def _tiny(model_type: str, **kw) -> Callable:
    return lambda bert, tmp: build_tiny_checkpoint(model_type, tmp / model_type, **kw)


def _planted(rows: list[int], value: float) -> Callable:
    def make(bert: Path, tmp: Path) -> Path:
        e = np.random.default_rng(0).normal(size=(40, 32))
        e[rows] = value
        return build_tiny_checkpoint("bert", tmp / "nan", plant={"embeddings.position_embeddings.weight": e})

    return make


class _Evil:
    """Unpickling this would create a file; weights_only loading must refuse it."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def _malicious_bin(bert: Path, tmp: Path) -> Path:
    import torch

    m = tmp / "evil"
    m.mkdir()
    shutil.copyfile(bert / "config.json", m / "config.json")
    torch.save({"embeddings.position_embeddings.weight": _Evil(str(tmp / "PWNED"))}, m / "pytorch_model.bin")
    return m


def _not_torch_bin(bert: Path, tmp: Path) -> Path:
    m = tmp / "junk"
    m.mkdir()
    shutil.copyfile(bert / "config.json", m / "config.json")
    (m / "pytorch_model.bin").write_bytes(pickle.dumps({"hello": "world"})[:10] + b"garbage")
    return m


def _bad_index(bert: Path, tmp: Path) -> Path:
    m = tmp / "idx"
    m.mkdir()
    shutil.copyfile(bert / "config.json", m / "config.json")
    (m / "model.safetensors.index.json").write_text("{not json")
    return m


def _missing_shard(bert: Path, tmp: Path) -> Path:
    m = tmp / "shard"
    m.mkdir()
    shutil.copyfile(bert / "config.json", m / "config.json")
    (m / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"embeddings.position_embeddings.weight": "model-00001-of-00002.safetensors"}})
    )
    return m


def _empty_dir(bert, tmp):
    (tmp / "empty").mkdir()
    return tmp / "empty"


def _config_only(bert, tmp):
    (tmp / "c").mkdir()
    shutil.copyfile(bert / "config.json", tmp / "c" / "config.json")
    return tmp / "c"


M = "{model}"  # placeholder for the built input in the argument list
CASES: list[tuple[str, Callable | None, list[str], str]] = [
    ("nonexistent path", None, ["heatmap", "./no/such/model", "-o", "out.png"], "no such file or folder"),
    ("folder without config", _empty_dir, ["heatmap", M, "-o", "out.png"], "no config.json"),
    ("config but no weights", _config_only, ["heatmap", M, "-o", "out.png"], "no weight file"),
    ("unknown model_type", _config(lambda c: {**c, "model_type": "frobnicator"}), ["heatmap", M, "-o", "out.png"], "unknown model_type 'frobnicator'"),
    ("config without model_type", _config(lambda c: {k: v for k, v in c.items() if k != "model_type"}), ["toeplitzness", M], "has no model_type"),
    ("config not JSON", _config(lambda c: "{oops"), ["toeplitzness", M], "cannot read config.json"),
    ("T5 heatmap", _tiny("t5"), ["heatmap", M, "-o", "out.png"], "relative bucket bias"),
    ("LLaMA heatmap", _tiny("llama"), ["heatmap", M, "-o", "out.png"], "rotary position embeddings"),
    ("BLOOM toeplitzness", _tiny("bloom"), ["toeplitzness", M], "ALiBi"),
    ("empty safetensors", _bytes(lambda b: b""), ["heatmap", M, "-o", "out.png"], "header too small"),
    ("truncated safetensors", _bytes(lambda b: b[: len(b) - 1000]), ["heatmap", M, "-o", "out.png"], "not fully covered"),
    ("header length too large", _bytes(lambda b: struct.pack("<Q", 2**40) + b[8:]), ["heatmap", M, "-o", "out.png"], "header too large"),
    ("header not JSON", _bytes(lambda b: b[:8] + b"}" + b[9:]), ["toeplitzness", M], "not a valid safetensors file"),
    ("offsets beyond the file", _edit_tensor("data_offsets", [0, 10**9]), ["heatmap", M, "-o", "out.png"], "invalid offset"),
    ("dtype that lies", _edit_tensor("dtype", "F64"), ["heatmap", M, "-o", "out.png"], "invalid shape, data type, or offset"),
    ("shape that lies", _edit_tensor("shape", [40, 33]), ["toeplitzness", M], "invalid shape, data type, or offset"),
    ("unknown dtype", _edit_tensor("dtype", "Q7"), ["toeplitzness", M], "unknown variant"),
    ("integer position table", _edit_tensor("dtype", "I32"), ["toeplitzness", M], "not a floating-point type"),
    ("overlapping offsets", _overlapping, ["toeplitzness", M], "invalid offset"),
    ("bin that is not a torch file", _not_torch_bin, ["heatmap", M, "-o", "out.png"], "not a readable PyTorch checkpoint"),
    ("bin with code in its pickle", _malicious_bin, ["toeplitzness", M], "not a readable PyTorch checkpoint"),
    ("weight index not JSON", _bad_index, ["toeplitzness", M], "not a valid weight index"),
    ("index names a missing shard", _missing_shard, ["toeplitzness", M], "is missing"),
    ("NaN rows", _planted([3, 17], np.nan), ["heatmap", M, "-o", "out.png"], "NaN or Inf in 2 row(s): 3, 17"),
    ("Inf rows", _planted([0], np.inf), ["toeplitzness", M], "NaN or Inf in 1 row(s): 0"),
    ("--positions out of range", None, ["heatmap", "sinusoidal:64x8", "--positions", "0:100", "-o", "out.png"], "out of range or empty"),
    ("--positions empty", None, ["toeplitzness", "sinusoidal:64x8", "--positions", "5:5"], "out of range or empty"),
    ("--positions n < 2", None, ["toeplitzness", "sinusoidal:64x8", "--positions", "5:6"], "at least 2 positions"),
    ("--positions malformed", None, ["toeplitzness", "sinusoidal:64x8", "--positions", "five"], "not of the form A:B"),
    ("unknown position table", None, ["heatmap", "sinusoidal:64x8", "-o", "out.png", "--table", "x"], None),
    ("output is a directory", None, ["heatmap", "sinusoidal:64x8", "-o", "."], "is a directory"),
    ("output folder missing", None, ["heatmap", "sinusoidal:64x8", "-o", "nowhere/out.png"], "does not exist"),
    ("output not writable", None, ["heatmap", "sinusoidal:64x8", "-o", "/proc/posviz-test.png"], "cannot write"),
    ("unknown output extension", None, ["heatmap", "sinusoidal:64x8", "-o", "out.bmp"], "unknown output extension"),
    ("json to a .png", None, ["toeplitzness", "sinusoidal:64x8", "-f", "json", "-o", "out.png"], "unknown output extension"),
    ("bad --normalize", None, ["toeplitzness", "sinusoidal:64x8", "--normalize", "zscore"], "Invalid value"),
    ("negative --null-draws", None, ["toeplitzness", "sinusoidal:64x8", "--null-draws", "-1"], "Invalid value"),
    ("--context 0", None, ["heads", "sinusoidal:64x8", "--context", "0"], "Invalid value"),
    ("--context on a model without RoPE", lambda bert, tmp: bert, ["heads", M, "--context", "512"], "--context applies to RoPE models only"),
    ("unknown colormap", None, ["heatmap", "sinusoidal:64x8", "--cmap", "rainbowz", "-o", "out.png"], "unknown colormap"),
    ("hub id offline, not cached", None, ["toeplitzness", "org/not-cached"], "HF_HUB_OFFLINE is set"),
]
# the synthetic controls have no tables: drop that row's fragment check to the real model below
CASES = [c for c in CASES if c[3] is not None]


def _run(args: list[str], cwd: Path):
    old = os.getcwd()
    os.chdir(cwd)
    try:
        return runner.invoke(app, args)
    finally:
        os.chdir(old)


def _assert_clean_failure(result, fragment: str, workdir: Path, before: set) -> None:
    assert result.exit_code == 2, result.output
    lines = [x for x in result.output.splitlines() if x.strip()]
    assert len(lines) == 1, result.output
    assert lines[0].startswith("error: ")
    assert fragment in lines[0], lines[0]
    assert "Traceback" not in result.output
    assert set(workdir.iterdir()) == before  # nothing written, no temp files left


@pytest.mark.parametrize("name,make,args,fragment", CASES, ids=[c[0] for c in CASES])
def test_bad_input(name, make, args, fragment, bert, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    model = make(bert, inputs) if make else None
    argv = [str(model) if a == M else a for a in args]
    before = set(work.iterdir())
    result = _run(argv, work)
    _assert_clean_failure(result, fragment, work, before)
    assert not (inputs / "PWNED").exists()  # nothing from a checkpoint was executed


def test_unknown_table_on_a_real_model(bert, tmp_path):
    result = _run(["heatmap", str(bert), "--table", "decoder", "-o", "out.png"], tmp_path)
    _assert_clean_failure(result, "has no position table 'decoder'", tmp_path, set())


@pytest.fixture
def hub(fake_hub):
    return fake_hub


@pytest.mark.parametrize(
    "repo,fragment",
    [("org/nope", "does not exist on the Hugging Face Hub"), ("org/gated", "is gated")],
)
def test_bad_hub_ids(hub, tmp_path, repo, fragment):
    hub.gated.add("org/gated")
    work = tmp_path / "work"
    work.mkdir()
    _assert_clean_failure(_run(["heatmap", repo, "-o", "out.png"], work), fragment, work, set())


def test_unreachable_hub(online, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    work = tmp_path / "work"
    work.mkdir()
    _assert_clean_failure(_run(["toeplitzness", "org/model"], work), "cannot be reached", work, set())


def test_table_has_at_least_25_rows():
    assert len(CASES) + 4 >= 25


# ---- posviz extrapolate: options checked before (or without) running a model -------------------------
@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> Path:
    return build_tiny_checkpoint("llama", tmp_path_factory.mktemp("llama") / "m")


C = "{corpus}"  # placeholder: a corpus file of a few words
EXTRAPOLATE_CASES: list[tuple[str, str, list[str], str]] = [
    ("lengths not integers", "bert", ["--lengths", "64,abc"], "'abc' is not a length"),
    ("length zero", "bert", ["--lengths", "0,64"], "'0' is not a length"),
    ("lengths empty", "bert", ["--lengths", ""], "is not a length"),
    ("corpus too short", "minilm", ["--corpus", C, "--lengths", "64,128"], "too short for the longest length 128"),
    ("unknown scaling type", "llama", ["--rope-scaling", "ntk:2"], "unknown scaling type 'ntk'"),
    ("scaling without a factor", "llama", ["--rope-scaling", "linear"], "not of the form TYPE:FACTOR"),
    ("malformed factor", "llama", ["--rope-scaling", "yarn:four"], "the factor 'four' is not a number"),
    ("factor below 1", "llama", ["--rope-scaling", "linear:0.5"], "at least 1"),
    ("scaling a model without RoPE", "bert", ["--rope-scaling", "linear:2"], "applies to RoPE models"),
    ("stride not shorter than a window", "bert", ["--lengths", "16,32", "--stride", "16"], "--stride 16"),
    ("no model", "", ["--lengths", "64"], "Missing argument"),
]


@pytest.mark.parametrize("name,model,args,fragment", EXTRAPOLATE_CASES, ids=[c[0] for c in EXTRAPOLATE_CASES])
def test_bad_extrapolate_input(name, model, args, fragment, bert, llama, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    inputs, work = tmp_path / "inputs", tmp_path / "work"
    inputs.mkdir()
    work.mkdir()
    (inputs / "tiny.txt").write_text("Return the sum of a and b.")
    spec = {"bert": str(bert), "llama": str(llama), "minilm": "sentence-transformers/all-MiniLM-L6-v2", "": None}[model]
    argv = ["extrapolate", *([spec] if spec else []), *[str(inputs / "tiny.txt") if a == C else a for a in args],
            "-o", "out.json", "-o", "out.png"]
    _assert_clean_failure(_run(argv, work), fragment, work, set())


def test_extrapolate_refuses_an_existing_output(bert, tmp_path):
    (tmp_path / "out.json").write_text("[]")
    before = set(tmp_path.iterdir())
    _assert_clean_failure(_run(["extrapolate", str(bert), "-o", "out.json"], tmp_path), "output out.json exists", tmp_path, before)
    assert (tmp_path / "out.json").read_text() == "[]"
