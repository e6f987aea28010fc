"""Fuzz the checkpoint reader: mutated safetensors bytes and headers give either a
result or a clean PosvizError, never another exception (bounded in time)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.numpy import save_file

from posviz.errors import PosvizError
from posviz.read.embeddings import load_position_embeddings
from tests.conftest import examples

NAME = "embeddings.position_embeddings.weight"


@pytest.fixture(scope="module")
def seed_file(tmp_path_factory):
    folder = tmp_path_factory.mktemp("posviz-fuzz")  # removed by pytest, unlike a bare mkdtemp
    rng = np.random.default_rng(0)
    save_file({NAME: rng.normal(size=(24, 8)).astype(np.float32), "encoder.w": rng.normal(size=(4, 4)).astype(np.float16)}, folder / "model.safetensors")
    (folder / "config.json").write_text(json.dumps({"model_type": "bert"}))
    data = (folder / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    return folder, data, json.loads(data[8 : 8 + n]), data[8 + n :]


def _load(folder: Path, data: bytes) -> None:
    (folder / "model.safetensors").write_bytes(data)
    try:
        pe = load_position_embeddings(str(folder))
    except PosvizError as e:
        assert "\n" not in str(e)
        return
    assert pe.matrix.dtype == np.float64 and np.isfinite(pe.matrix).all()


fuzz_settings = settings(max_examples=examples(1000), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@fuzz_settings
@given(st.data())
def test_mutated_bytes(seed_file, data):
    folder, original, _, _ = seed_file
    buf = bytearray(original)
    for _ in range(data.draw(st.integers(1, 8))):
        op = data.draw(st.sampled_from(["flip", "truncate", "insert", "delete"]))
        pos = data.draw(st.integers(0, max(0, len(buf) - 1)))
        if op == "flip" and buf:
            buf[pos] = data.draw(st.integers(0, 255))
        elif op == "truncate":
            del buf[pos:]
        elif op == "insert":
            buf[pos:pos] = data.draw(st.binary(min_size=1, max_size=16))
        elif op == "delete":
            del buf[pos : pos + data.draw(st.integers(1, 16))]
    _load(folder, bytes(buf))


DTYPES = ["F32", "F16", "BF16", "F64", "I64", "I8", "U8", "BOOL", "F8_E4M3", "XX", ""]


@fuzz_settings
@given(
    dtype=st.sampled_from(DTYPES),
    shape=st.lists(st.integers(-3, 2**33), min_size=0, max_size=3),
    offsets=st.lists(st.integers(-5, 5000), min_size=0, max_size=3),
    header_len_delta=st.integers(-4, 4),
)
def test_lying_headers(seed_file, dtype, shape, offsets, header_len_delta):
    folder, _, header, body = seed_file
    h = json.loads(json.dumps(header))
    h[NAME] = {"dtype": dtype, "shape": shape, "data_offsets": offsets}
    hb = json.dumps(h).encode()
    _load(folder, struct.pack("<Q", max(0, len(hb) + header_len_delta)) + hb + body)
