"""The pieces of the Hub range reader on their own: the restricted unpickler, range bookkeeping, the slice store."""

from __future__ import annotations

import io
import pickle
import zipfile

import numpy as np
import pytest

from posviz.errors import CheckpointError
from posviz.hub.remote import FetchStats, _assemble, _gaps
from posviz.hub.slices import SliceStore, store_folder
from posviz.hub.torch_zip import TensorRef, load_state_dict_refs


def _data_pkl(obj) -> bytes:
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as z:
        return z.read(next(n for n in z.namelist() if n.endswith("/data.pkl")))


def test_a_real_state_dict_becomes_descriptors():
    import torch

    base = torch.zeros(6, 4)
    refs = load_state_dict_refs(_data_pkl({"w": base, "v": base[2:], "t": base.t(), "p": torch.nn.Parameter(torch.ones(3).half())}), "x.bin")
    assert refs["w"] == TensorRef("0", "FloatStorage", 0, (6, 4), (4, 1))
    assert refs["v"].offset == 8 and refs["v"].key == refs["w"].key
    assert refs["t"].stride == (1, 4) and refs["p"].storage == "HalfStorage"


def test_nested_state_dicts_are_unwrapped():
    import torch

    assert list(load_state_dict_refs(_data_pkl({"state_dict": {"a": torch.zeros(2)}}), "x.bin")) == ["a"]


@pytest.mark.parametrize("obj,fragment", [
    ({"a": print}, "asks for __builtin__.print"),
    ({"a": np.float64(1.0)}, "numpy"),
    ({"a": 1}, "does not hold a state dict of tensors"),
])
def test_anything_but_tensors_is_refused(obj, fragment):
    with pytest.raises(CheckpointError, match=fragment):
        load_state_dict_refs(pickle.dumps(obj, protocol=2), "x.bin")


def test_a_global_reduce_is_refused_before_anything_runs(tmp_path):
    marker = tmp_path / "ran"
    payload = f"cos\nsystem\n(S'touch {marker}'\ntR.".encode()
    with pytest.raises(CheckpointError, match="never executes code"):
        load_state_dict_refs(payload, "x.bin")
    assert not marker.exists()


def test_gaps_and_assembly():
    pieces = [(0, 4, b"abcd"), (8, 12, b"ijkl")]
    assert _gaps(pieces, 0, 12) == [(4, 8)]
    assert _gaps(pieces, 2, 3) == [] and _gaps(pieces, 10, 20) == [(12, 20)]
    assert _assemble([*pieces, (4, 8, b"efgh")], 2, 10) == b"cdefghij"


def test_the_slice_store_round_trip(tmp_path):
    store = SliceStore.for_file("http://127.0.0.1:1234", "org/m", "c0ffee", "model.safetensors", '"abc"')
    assert store.folder.parent == store_folder("http://127.0.0.1:1234", "org/m", "c0ffee")
    assert SliceStore.find("http://127.0.0.1:1234", "org/m", "c0ffee", "model.safetensors") is None
    whole = tmp_path / "whole"
    whole.write_bytes(b"0123456789")
    store.write({"size": 100, "etag": "abc"}, [(0, 8, b"\0" * 8), (50, 60, whole)])
    found = SliceStore.find("http://127.0.0.1:1234", "org/m", "c0ffee", "model.safetensors")
    assert found is not None and found.meta()["size"] == 100
    assert [(a, b) for a, b, _ in found.slices()] == [(0, 8), (50, 60)]
    assert SliceStore.find("http://other:1234", "org/m", "c0ffee", "model.safetensors") is None  # keyed by endpoint


def test_the_summary_line():
    assert FetchStats("model.safetensors", 258 * 2**20, int(3.1 * 2**20), 2).summary() == \
        "fetched 3.1 MiB of 258.0 MiB (2 ranges, model.safetensors)"
