"""Hub weight files read by byte ranges, against the local Hub emulator (tests/hub_emulator.py).

Checkpoints are real (transformers ``save_pretrained``, ``torch.save``), a few
MiB each, with E_P a small fraction of the file; every byte the emulator sends
is counted.
"""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
from typer.testing import CliRunner

from posviz.cli.app import app
from posviz.hub.safetensors_ranges import PREFIX
from posviz.read.embeddings import load_position_embeddings

pytestmark = pytest.mark.usefixtures("one_thread")

#: Fixed costs of a range read beyond the tensors: for a zip, the 4 KiB tail holding the
#: end records and central directory, data.pkl and local headers.
ZIP_OVERHEAD = 4096 + 64 * 1024
GPT2 = dict(n_embd=64, n_layer=3, vocab_size=6000, n_positions=128)  # wte 1.5 MiB, E_P 32 KiB


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def _rows(result) -> list[dict]:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _header(path) -> dict:
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n))


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The same GPT-2-shaped model as model.safetensors, as pytorch_model.bin, and sharded."""
    from tests.checkpoint_factory import build_tiny_checkpoint

    root = tmp_path_factory.mktemp("served")
    return {
        "st": build_tiny_checkpoint("gpt2", root / "st", **GPT2),
        "bin": build_tiny_checkpoint("gpt2", root / "bin", safe_serialization=False, **GPT2),
        "sharded": build_tiny_checkpoint("gpt2", root / "sharded", max_shard_size="400KB", **GPT2),
    }


@pytest.mark.parametrize("kind", ["st", "bin"])
def test_only_the_position_table_is_fetched(fake_hub, served, kind, monkeypatch):
    folder = served[kind]
    fake_hub.add("org/gpt2-shaped", folder)
    weight = "model.safetensors" if kind == "st" else "pytorch_model.bin"
    size = (folder / weight).stat().st_size
    local = load_position_embeddings(str(folder))
    ep_bytes = local.matrix.size * 4

    pe = load_position_embeddings("org/gpt2-shaped")
    np.testing.assert_allclose(pe.matrix, local.matrix, rtol=0, atol=1e-12)
    sent = fake_hub.file_bytes("org/gpt2-shaped", weight)
    # safetensors: the header comes with the first request, which fetches at least PREFIX bytes (one round trip less)
    header = max(8 + struct.unpack("<Q", (folder / weight).read_bytes()[:8])[0], PREFIX) if kind == "st" else ZIP_OVERHEAD
    assert sent <= ep_bytes + header + 1024, (sent, ep_bytes, size)
    assert sent < size / 10  # E_P is a small fraction of the file: most of it was never sent
    assert ("org/gpt2-shaped", weight) not in {(r.repo_id, r.filename) for r in fake_hub.requests if r.span == (0, size)}

    # Offline, with the score cache bypassed: served from the slice store, not a request made.
    fake_hub.reset()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    args = ["toeplitzness", "org/gpt2-shaped", str(folder), "-f", "json", "--null-draws", "0", "--no-cache"]
    rows = _rows(invoke(*args))
    assert rows[0]["toeplitzness"] == pytest.approx(rows[1]["toeplitzness"], abs=1e-12)
    assert fake_hub.requests == []


def test_the_numbers_match_the_whole_file_path(fake_hub, served, monkeypatch):
    """Range reads and --full-download give the same scores; --full-download sends the whole file."""
    fake_hub.add("org/ranged", served["bin"])
    fake_hub.add("org/whole", served["bin"])
    args = ["-f", "json", "--null-draws", "0", "--no-cache"]
    ranged = _rows(invoke("toeplitzness", "org/ranged", *args))[0]
    whole = _rows(invoke("--full-download", "toeplitzness", "org/whole", *args))[0]
    size = (served["bin"] / "pytorch_model.bin").stat().st_size
    assert fake_hub.ranges("org/whole", "pytorch_model.bin") == [(0, size)]
    assert whole["toeplitzness"] == pytest.approx(ranged["toeplitzness"], abs=1e-12)
    assert whole["toeplitzness_offdiag"] == pytest.approx(ranged["toeplitzness_offdiag"], abs=1e-12)
    monkeypatch.setenv("POSVIZ_FULL_DOWNLOAD", "1")
    fake_hub.add("org/whole-by-env", served["st"])
    _rows(invoke("toeplitzness", "org/whole-by-env", *args))
    assert fake_hub.ranges("org/whole-by-env", "model.safetensors") == [(0, (served["st"] / "model.safetensors").stat().st_size)]


def test_sharded_model_fetches_only_from_the_shard_holding_ep(fake_hub, served):
    folder = served["sharded"]
    fake_hub.add("org/sharded", folder)
    weight_map = json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"]
    needed = weight_map["wpe.weight"]
    assert len(set(weight_map.values())) >= 3
    pe = load_position_embeddings("org/sharded")
    np.testing.assert_allclose(pe.matrix, load_position_embeddings(str(folder)).matrix, rtol=0, atol=1e-12)
    touched = {r.filename for r in fake_hub.requests if r.method == "GET" and r.repo_id == "org/sharded"}
    assert touched == {"config.json", "model.safetensors.index.json", needed}
    header = _header(folder / needed)
    begin, end = header["wpe.weight"]["data_offsets"]
    first = max(8 + len(json.dumps(header)), PREFIX)  # the first request: the header, at least PREFIX bytes
    assert fake_hub.file_bytes("org/sharded", needed) <= (end - begin) + first + 1024


@pytest.mark.parametrize("kind", ["st", "bin"])
def test_heads_fetches_only_the_layer_asked_for(fake_hub, served, kind, monkeypatch):
    folder = served[kind]
    fake_hub.add("org/layers", folder)
    r = invoke("-v", "heads", "org/layers", "--layer", "1", "-f", "json")
    assert r.exit_code == 0, r.output
    weight = "model.safetensors" if kind == "st" else "pytorch_model.bin"
    assert "fetched " in r.stderr and f"{weight})" in r.stderr  # the -v summary
    spans = fake_hub.ranges("org/layers", weight)
    if kind == "st":
        header = _header(folder / weight)
        start = 8 + struct.unpack("<Q", (folder / weight).read_bytes()[:8])[0]
        # Beyond the first request (the header, at least PREFIX bytes: in this small file, the first tensors too)
        tensors = {name for name, e in header.items() if name != "__metadata__"
                   for a, b in spans if a != 0 and a < start + e["data_offsets"][1] and b > start + e["data_offsets"][0]}
        assert tensors, spans
        assert all(t.startswith("h.1.") or t == "wpe.weight" for t in tensors), tensors
        assert any(t.startswith("h.1.attn") for t in tensors) and any(t.startswith("h.1.ln_1") for t in tensors)
    layer = sum(np.prod(s) for s in _layer_shapes(folder, kind, "h.1.")) * 4
    assert fake_hub.file_bytes("org/layers", weight) <= layer + 32 * 1024 + PREFIX + ZIP_OVERHEAD
    # The same command offline, from the slice store; another layer is not there.
    fake_hub.reset()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    again = invoke("heads", "org/layers", "--layer", "1", "-f", "json")
    assert again.exit_code == 0 and json.loads(again.stdout) == json.loads(r.stdout) and fake_hub.requests == []
    other = invoke("heads", "org/layers", "--layer", "2")
    assert other.exit_code == 2 and "never fetched" in other.output


def _layer_shapes(folder, kind, prefix):
    if kind == "st":
        return [e["shape"] for n, e in _header(folder / "model.safetensors").items() if n.startswith(prefix) or n == "wpe.weight"]
    import torch

    sd = torch.load(folder / "pytorch_model.bin", weights_only=True)
    return [tuple(t.shape) for n, t in sd.items() if n.startswith(prefix) or n == "wpe.weight"]


def test_a_plain_torch_save_of_a_state_dict_with_views(fake_hub, tmp_path):
    """Shared storages, offsets and strides (a transposed view) decode like torch.load."""
    import torch

    from posviz.read.checkpoints import Checkpoint
    from posviz.read.sources import resolve_source

    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    base = torch.randn(50, 8, dtype=torch.float64)
    sd = {"a": base, "tail": base[10:], "t": base.t(), "h": torch.randn(7, 3).half(), "b": torch.randn(6, 4).bfloat16()}
    torch.save(sd, folder / "pytorch_model.bin")
    fake_hub.add("org/views", folder)
    ckpt = Checkpoint(resolve_source("org/views"))
    for name, t in sd.items():
        np.testing.assert_array_equal(ckpt.read(name), t.to(torch.float64).numpy())
    np.testing.assert_array_equal(ckpt.read("tail", slice(5, 9)), base[15:19].numpy())
    assert ckpt.dtype("b") == "bfloat16" and ckpt.shape("t") == (8, 50)


def test_a_legacy_bin_is_downloaded_whole_with_one_line(fake_hub, tmp_path):
    from tests.checkpoint_factory import build_tiny_checkpoint

    folder = build_tiny_checkpoint("gpt2", tmp_path / "legacy", safe_serialization=False, legacy_bin=True)
    fake_hub.add("org/legacy", folder)
    r = invoke("toeplitzness", "org/legacy", str(folder), "-f", "json", "--null-draws", "0", "--no-cache")
    rows = _rows(r)
    assert rows[0]["toeplitzness"] == pytest.approx(rows[1]["toeplitzness"], abs=1e-12)
    notes = [ln for ln in r.stderr.splitlines() if "legacy (non-zip)" in ln]
    assert len(notes) == 1 and "downloading it whole" in notes[0]
    size = (folder / "pytorch_model.bin").stat().st_size
    assert (0, size) in fake_hub.ranges("org/legacy", "pytorch_model.bin")


def test_slices_are_stored_by_endpoint_repo_commit_and_etag(fake_hub, served):
    from posviz.util.paths import cache_dir

    commit = fake_hub.add("org/stored", served["st"])
    load_position_embeddings("org/stored")
    folders = [p for p in cache_dir("hub-slices").rglob("meta.json") if "org--stored" in str(p)]
    assert len(folders) == 1
    meta = json.loads(folders[0].read_text())
    assert meta["commit"] == commit and folders[0].parent.parent.name == commit
    assert folders[0].parent.name.startswith("model.safetensors@") and meta["etag"] in folders[0].parent.name
    assert meta["endpoint"] == fake_hub.endpoint
