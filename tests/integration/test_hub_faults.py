"""Bad servers and bad files met by the Hub range reader: exit 2, one line, nothing stored.

Each case is served by the local Hub emulator (tests/hub_emulator.py), either
with a fault switched on or with a crafted weight file.
"""

from __future__ import annotations

import json
import pickle
import struct
import zipfile

import numpy as np
import pytest
from typer.testing import CliRunner

from posviz.cli.app import app
from posviz.read.embeddings import load_position_embeddings
from posviz.util.paths import cache_dir

pytestmark = pytest.mark.usefixtures("one_thread")
GPT2 = dict(n_embd=32, n_layer=2, vocab_size=3000, n_positions=64)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from tests.checkpoint_factory import build_tiny_checkpoint

    root = tmp_path_factory.mktemp("faults")
    return {"st": build_tiny_checkpoint("gpt2", root / "st", **GPT2),
            "bin": build_tiny_checkpoint("gpt2", root / "bin", safe_serialization=False, **GPT2)}


def _stored() -> list:
    root = cache_dir("hub-slices")
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def _fails_cleanly(fragment: str, *args: str) -> str:
    r = CliRunner().invoke(app, ["toeplitzness", *args, "--null-draws", "0", "--no-cache"])
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert r.exit_code == 2, r.output
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], r.output
    assert _stored() == []
    return lines[0]


def _copy_with(folder, tmp_path, name: str, data: bytes):
    out = tmp_path / "served"
    out.mkdir()
    (out / "config.json").write_bytes((folder / "config.json").read_bytes())
    (out / name).write_bytes(data)
    return out


@pytest.mark.parametrize("kind", ["st", "bin"])
def test_a_server_that_ignores_range_is_read_once_in_full(fake_hub, model, kind, monkeypatch, capfd):
    folder = model[kind]
    fake_hub.add("org/m", folder)
    fake_hub.faults.ignore_range = True
    weight = "model.safetensors" if kind == "st" else "pytorch_model.bin"
    size = (folder / weight).stat().st_size
    pe = load_position_embeddings("org/m")
    np.testing.assert_allclose(pe.matrix, load_position_embeddings(str(folder)).matrix, rtol=0, atol=1e-12)
    assert fake_hub.ranges("org/m", weight) == [(0, size)]  # detected on the first request, never asked again
    assert "ignored a range request" in capfd.readouterr().err
    fake_hub.reset()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    np.testing.assert_array_equal(load_position_embeddings("org/m").matrix, pe.matrix)
    assert fake_hub.requests == []


def _safetensors(header: dict, data: bytes, claimed: int | None = None) -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text) if claimed is None else claimed) + text + data


@pytest.mark.parametrize(
    "header,data,claimed,fragment",
    [
        ({"wpe.weight": {"dtype": "F32", "shape": [64, 32], "data_offsets": [0, 8192]}}, b"\0" * 100, None, "lies outside the file"),
        ({"wpe.weight": {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 64]},
          "wte.weight": {"dtype": "F32", "shape": [4, 4], "data_offsets": [32, 96]}}, b"\0" * 96, None, "overlap"),
        ({"wpe.weight": {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 64]}}, b"\0" * 64, 10**6, "header claims"),
        ({"wpe.weight": {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 60]}}, b"\0" * 64, None, "needs 64"),
        ({"wpe.weight": {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 64]}}, b"\0" * 64, 20, "not a valid safetensors file"),
    ],
    ids=["beyond-the-file", "overlapping", "header-longer-than-file", "size-mismatch", "truncated-header"],
)
def test_a_lying_safetensors_header(fake_hub, model, tmp_path, header, data, claimed, fragment):
    fake_hub.add("org/liar", _copy_with(model["st"], tmp_path, "model.safetensors", _safetensors(header, data, claimed)))
    _fails_cleanly(fragment, "org/liar")


def _patch_central_directory(data: bytes, new_offset: int) -> bytes:
    """Point every central-directory entry's local header offset at ``new_offset``."""
    out = bytearray(data)
    pos = out.find(b"PK\x01\x02")
    while pos != -1:
        struct.pack_into("<L", out, pos + 42, new_offset)
        pos = out.find(b"PK\x01\x02", pos + 4)
    return bytes(out)


def test_a_zip_whose_central_directory_points_outside_the_file(fake_hub, model, tmp_path):
    data = (model["bin"] / "pytorch_model.bin").read_bytes()
    fake_hub.add("org/zip", _copy_with(model["bin"], tmp_path, "pytorch_model.bin", _patch_central_directory(data, len(data) + 1000)))
    _fails_cleanly("points outside the file", "org/zip")


def test_a_zip_whose_end_record_points_outside_the_file(fake_hub, model, tmp_path):
    data = bytearray((model["bin"] / "pytorch_model.bin").read_bytes())
    eocd = data.rfind(b"PK\x05\x06")
    struct.pack_into("<L", data, eocd + 16, len(data) * 2)  # offset of the central directory
    eocd64 = data.rfind(b"PK\x06\x06")  # torch writes zip64 end records too, which zipfile prefers
    if eocd64 != -1:
        struct.pack_into("<Q", data, eocd64 + 48, len(data) * 2)
    fake_hub.add("org/zip", _copy_with(model["bin"], tmp_path, "pytorch_model.bin", bytes(data)))
    _fails_cleanly("points", "org/zip")


class _Evil:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        import os

        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("payload", ["reduce", "global-only"])
def test_a_data_pkl_that_calls_a_function_is_refused(fake_hub, model, tmp_path, payload):
    marker = tmp_path / "pwned"
    obj = {"wpe.weight": _Evil(str(marker))} if payload == "reduce" else {"x": print}
    served = tmp_path / "evil"
    served.mkdir()
    (served / "config.json").write_bytes((model["bin"] / "config.json").read_bytes())
    with zipfile.ZipFile(served / "pytorch_model.bin", "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pickle.dumps(obj, protocol=2))
        z.writestr("archive/version", "3\n")
    fake_hub.add("org/evil", served)
    line = _fails_cleanly("never needs", "org/evil")
    assert ("system" in line) if payload == "reduce" else ("print" in line)
    assert not marker.exists()


def test_an_etag_that_changes_between_requests(fake_hub, model):
    fake_hub.add("org/moving", model["st"])
    fake_hub.faults.change_etag = True
    _fails_cleanly("changed on the Hub while it was being read", "org/moving")


def test_a_connection_dropped_mid_range_is_retried_once(fake_hub, model):
    fake_hub.add("org/flaky", model["bin"])
    fake_hub.faults.drop_ranges = 1
    pe = load_position_embeddings("org/flaky")
    np.testing.assert_allclose(pe.matrix, load_position_embeddings(str(model["bin"])).matrix, rtol=0, atol=1e-12)
    assert fake_hub.faults.drop_ranges == 0


def test_a_connection_dropped_twice_is_an_error(fake_hub, model):
    fake_hub.add("org/down", model["st"])
    fake_hub.faults.drop_ranges = 2
    _fails_cleanly("connection dropped", "org/down")
