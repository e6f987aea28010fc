"""A safetensors file on the Hub, read by byte ranges: the header, then only the tensors (or rows) asked for.

The layout is safetensors' documented one: an 8-byte little-endian header
length, a JSON header mapping each tensor to its dtype, shape and
``data_offsets`` (relative to the end of the header), then the data. The header
is checked before anything is decoded: offsets inside the file, sizes that
match shape and dtype, no two tensors overlapping.
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any

import numpy as np

from posviz.errors import CheckpointError
from posviz.hub.remote import HubFile

#: safetensors dtype → (numpy dtype, bytes per element); BF16 is widened by hand.
DTYPES: dict[str, tuple[str, int]] = {
    "F64": ("<f8", 8), "F32": ("<f4", 4), "F16": ("<f2", 2), "BF16": ("<u2", 2),
    "I64": ("<i8", 8), "I32": ("<i4", 4), "I16": ("<i2", 2), "I8": ("i1", 1), "U8": ("u1", 1), "BOOL": ("?", 1),
}
_MAX_HEADER = 100 * 2**20  # safetensors' own limit
#: Bytes fetched first: the header length and the header of a model with a few hundred tensors (BERT-base with its
#: pre-training heads: 24 KB), in one round trip instead of two; a larger header costs a second request.
PREFIX = 32 * 1024


class RemoteSafetensors:
    """The reader interface of :class:`~posviz.read.checkpoints.Checkpoint` over a :class:`HubFile`."""

    def __init__(self, remote: HubFile) -> None:
        self.remote = remote
        self.path_label = remote.filename
        self._entries, self._data_start = parse_header(remote)

    def names(self) -> list[str]:
        return list(self._entries)

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._entries[name]["shape"])

    def dtype(self, name: str) -> str:
        return str(self._entries[name]["dtype"])

    def read(self, name: str, rows: slice | None) -> np.ndarray:
        entry = self._entries[name]
        shape = tuple(entry["shape"])
        np_dtype, size = DTYPES[entry["dtype"]]
        begin = entry["data_offsets"][0]
        if shape:
            start, stop = (0, shape[0]) if rows is None else rows.indices(shape[0])[:2]
            stop = max(stop, start)
            row = math.prod(shape[1:]) * size
            out_shape = (stop - start, *shape[1:])
        else:
            start, stop, row, out_shape = 0, 1, size, ()
        offset = self._data_start + begin + start * row
        data = self.remote.read(offset, offset + (stop - start) * row)
        if len(data) != (stop - start) * row:
            raise CheckpointError(f"{self.remote.filename}: tensor {name} is truncated")
        arr = np.frombuffer(data, dtype=np_dtype)
        if entry["dtype"] == "BF16":  # bfloat16 is the upper half of a float32
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        return arr.reshape(out_shape)

    def commit(self) -> None:
        """Keep what was fetched (see :meth:`HubFile.commit`)."""
        self.remote.commit()


def parse_header(remote: HubFile) -> tuple[dict[str, dict[str, Any]], int]:
    """Tensor entries and the offset where data starts; every offset checked against the file size.

    Raises
    ------
    CheckpointError
        If the header is truncated, not JSON, or lies (offsets outside the file,
        sizes that do not match, overlapping tensors).
    """
    name = remote.filename
    if remote.size < 8:
        raise CheckpointError(f"{name} is not a valid safetensors file: only {remote.size} bytes")
    remote.read(0, min(remote.size, PREFIX))  # one request for the length and, nearly always, the whole header
    (length,) = struct.unpack("<Q", remote.read(0, 8))
    if length > min(remote.size - 8, _MAX_HEADER):
        raise CheckpointError(f"{name} is not a valid safetensors file: its header claims {length} bytes, the file has {remote.size}")
    try:
        header = json.loads(remote.read(8, 8 + length))
        if not isinstance(header, dict):
            raise ValueError("the header is not a JSON object")
    except ValueError as e:
        raise CheckpointError(f"{name} is not a valid safetensors file: {str(e).splitlines()[0]}") from None
    header.pop("__metadata__", None)
    data_len = remote.size - 8 - length
    spans = []
    for key, entry in header.items():
        _check_entry(name, key, entry, data_len)
        spans.append((*entry["data_offsets"], key))
    spans.sort()
    for (_, end, a), (begin, _, b) in zip(spans, spans[1:], strict=False):
        if begin < end:
            raise CheckpointError(f"{name} is not a valid safetensors file: tensors {a} and {b} overlap")
    return header, 8 + length


def _check_entry(name: str, key: str, entry: Any, data_len: int) -> None:
    bad = f"{name} is not a valid safetensors file: tensor {key}"
    if not isinstance(entry, dict) or entry.get("dtype") not in DTYPES:
        raise CheckpointError(f"{bad} has no supported dtype")
    shape, offsets = entry.get("shape"), entry.get("data_offsets")
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise CheckpointError(f"{bad} has an invalid shape")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)):
        raise CheckpointError(f"{bad} has invalid data_offsets")
    begin, end = offsets
    if not 0 <= begin <= end <= data_len:
        raise CheckpointError(f"{bad} lies outside the file (bytes {begin}-{end} of {data_len})")
    if end - begin != math.prod(shape) * DTYPES[entry["dtype"]][1]:
        raise CheckpointError(f"{bad} takes {end - begin} bytes, but shape {shape} needs {math.prod(shape) * DTYPES[entry['dtype']][1]}")
