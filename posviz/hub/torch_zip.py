"""A ``pytorch_model.bin`` (torch's zip format) on the Hub, read by byte ranges.

What is fetched: the end of the file (end-of-central-directory record, zip64
records if any), the central directory (parsed by :mod:`zipfile`), the
``*/data.pkl`` record, and then only the storage records (``*/data/KEY``) of the
tensors read, or the part of them holding the rows asked for.

``data.pkl`` is read by :class:`StateDictUnpickler`, which never executes code:
the only globals it resolves are torch's tensor-rebuild functions and storage
types (replaced by functions that return :class:`TensorRef` descriptors) and
``collections.OrderedDict``; anything else is a :class:`~posviz.errors.CheckpointError`.
Entries are expected stored (uncompressed), as torch writes them, in little-endian byte order.
"""

from __future__ import annotations

import collections
import io
import math
import pickle
import struct
import zipfile
from dataclasses import dataclass
from typing import Any

import numpy as np

from posviz.errors import CheckpointError
from posviz.hub.remote import HubFile

#: torch storage types → (numpy dtype, bytes per element, torch dtype name). bfloat16 is widened by hand.
STORAGES: dict[str, tuple[str, int, str]] = {
    "DoubleStorage": ("<f8", 8, "float64"), "FloatStorage": ("<f4", 4, "float32"), "HalfStorage": ("<f2", 2, "float16"),
    "BFloat16Storage": ("<u2", 2, "bfloat16"), "LongStorage": ("<i8", 8, "int64"), "IntStorage": ("<i4", 4, "int32"),
    "ShortStorage": ("<i2", 2, "int16"), "CharStorage": ("i1", 1, "int8"), "ByteStorage": ("u1", 1, "uint8"),
    "BoolStorage": ("?", 1, "bool"),
}
_TAIL = 4096  # end of the file fetched first: the end records and, often, the central directory
_LOCAL_HEADER = struct.Struct("<4s5H3L2H")  # signature ... file name length, extra field length


@dataclass(frozen=True)
class StorageType:
    """A torch storage type named in ``data.pkl`` (e.g. ``torch.FloatStorage``), never imported."""

    name: str


@dataclass(frozen=True)
class TensorRef:
    """Where a tensor's elements are: a storage record, its dtype, and the view (offset, shape, stride)."""

    key: str
    storage: str
    offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]


def _rebuild_tensor(storage: Any, offset: Any, size: Any, stride: Any, *_: Any) -> TensorRef:
    if not isinstance(storage, tuple) or len(storage) != 2:
        raise pickle.UnpicklingError("a tensor is not backed by a storage record")
    try:
        return TensorRef(storage[0], storage[1], int(offset), tuple(int(d) for d in size), tuple(int(s) for s in stride))
    except (TypeError, ValueError):
        raise pickle.UnpicklingError("a tensor has an invalid shape or stride") from None


def _rebuild_parameter(data: Any, *_: Any) -> Any:
    return data


def _ordered_dict(*args: Any) -> collections.OrderedDict:
    if args and not isinstance(args[0], (list, tuple)):
        raise pickle.UnpicklingError("OrderedDict called with unexpected arguments")
    return collections.OrderedDict(*args)


_ALLOWED = {
    ("collections", "OrderedDict"): _ordered_dict,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
}


class StateDictUnpickler(pickle.Unpickler):
    """Unpickle a torch ``data.pkl`` into :class:`TensorRef` descriptors, executing nothing."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED:
            return _ALLOWED[(module, name)]
        if module == "torch" and name in STORAGES:
            return StorageType(name)
        raise pickle.UnpicklingError(f"it asks for {module}.{name}, which a state dict never needs")

    def persistent_load(self, pid: Any) -> Any:
        if not (isinstance(pid, tuple) and len(pid) >= 3 and pid[0] == "storage" and isinstance(pid[1], StorageType)):
            raise pickle.UnpicklingError("unexpected persistent id (not a tensor storage)")
        return (str(pid[2]), pid[1].name)


def load_state_dict_refs(data: bytes, label: str) -> dict[str, TensorRef]:
    """The tensors of a ``data.pkl`` as descriptors, unwrapping ``state_dict``/``model``/``module`` nesting."""
    try:
        obj = StateDictUnpickler(io.BytesIO(data)).load()
    except Exception as e:  # UnpicklingError, and whatever a malformed pickle raises
        raise CheckpointError(f"{label} is not a readable PyTorch checkpoint: data.pkl: {str(e).splitlines()[0] if str(e) else type(e).__name__}",
                              "posviz never executes code from a checkpoint") from None
    for key in ("state_dict", "model", "module"):
        if isinstance(obj, dict) and isinstance(obj.get(key), dict) and not any(isinstance(v, TensorRef) for v in obj.values()):
            obj = obj[key]
    if not isinstance(obj, dict) or not all(isinstance(v, TensorRef) for v in obj.values()):
        raise CheckpointError(f"{label} does not hold a state dict of tensors")
    return {str(k): v for k, v in obj.items()}


class _RangeReader(io.RawIOBase):
    """A seekable read-only file over a :class:`HubFile`, for :mod:`zipfile`."""

    def __init__(self, remote: HubFile) -> None:
        self.remote, self.pos = remote, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = {0: 0, 1: self.pos, 2: self.remote.size}[whence] + offset
        return self.pos

    def tell(self) -> int:
        return self.pos

    def readinto(self, buf) -> int:
        data = self.remote.read(self.pos, self.pos + len(buf))
        buf[: len(data)] = data
        self.pos += len(data)
        return len(data)


def is_zip(remote: HubFile) -> bool:
    """True if the file starts with a zip local-file header (torch's format since 1.6)."""
    return remote.read(0, 4) == b"PK\x03\x04"


class RemoteTorchZip:
    """The reader interface of :class:`~posviz.read.checkpoints.Checkpoint` over a torch zip on the Hub."""

    def __init__(self, remote: HubFile) -> None:
        self.remote = remote
        name = remote.filename
        remote.read(max(remote.size - _TAIL, 0), remote.size)  # one request for the end records
        try:
            self._zip = zipfile.ZipFile(io.BufferedReader(_RangeReader(remote), buffer_size=1))
            infos = {i.filename: i for i in self._zip.infolist()}
        except (zipfile.BadZipFile, zipfile.LargeZipFile, struct.error, ValueError, OSError) as e:
            raise CheckpointError(f"{name} is not a readable PyTorch checkpoint: {e}") from None
        pkl = [n for n in infos if n.endswith("/data.pkl") and n.count("/") == 1]
        if len(pkl) != 1:
            raise CheckpointError(f"{name} is not a readable PyTorch checkpoint: no single */data.pkl record")
        self._prefix = pkl[0][: -len("data.pkl")]
        self._infos = infos
        self._refs = load_state_dict_refs(self._record(pkl[0], 0, infos[pkl[0]].file_size), name)

    def _record(self, member: str, start: int, stop: int) -> bytes:
        """Bytes ``[start, stop)`` of a stored record, checked to lie inside the file."""
        info = self._infos.get(member)
        label = self.remote.filename
        if info is None:
            raise CheckpointError(f"{label} has no record {member}")
        if info.compress_type != zipfile.ZIP_STORED:
            raise CheckpointError(f"{label}: record {member} is compressed; torch writes stored records")
        head = info.header_offset  # zipfile shifts it when the end record's offsets disagree (negative: outside)
        if head < 0 or head + _LOCAL_HEADER.size + info.file_size > self.remote.size:
            raise CheckpointError(f"{label} is not a readable PyTorch checkpoint: the central directory points outside the file ({member})")
        # Local header, name, extra padding (torch aligns data to 64 bytes) and the data, in one request.
        guess = _LOCAL_HEADER.size + len(member.encode()) + len(info.extra) + 64
        first = self.remote.read(head, head + guess + (stop if start == 0 else 0))
        fields = _LOCAL_HEADER.unpack_from(first)
        name_at = _LOCAL_HEADER.size
        if fields[0] != b"PK\x03\x04" or first[name_at : name_at + fields[-2]] != member.encode():
            raise CheckpointError(f"{label} is not a readable PyTorch checkpoint: the central directory points at no record {member}")
        data_at = head + _LOCAL_HEADER.size + fields[-2] + fields[-1]
        if data_at + info.file_size > self.remote.size:
            raise CheckpointError(f"{label} is not a readable PyTorch checkpoint: record {member} runs past the end of the file")
        return self.remote.read(data_at + start, data_at + stop)

    def names(self) -> list[str]:
        return list(self._refs)

    def shape(self, name: str) -> tuple[int, ...]:
        return self._refs[name].shape

    def dtype(self, name: str) -> str:
        return STORAGES[self._refs[name].storage][2]

    def read(self, name: str, rows: slice | None) -> np.ndarray:
        ref = self._refs[name]
        np_dtype, item, _ = STORAGES[ref.storage]
        shape, stride = ref.shape, ref.stride
        offset = ref.offset
        if rows is not None and shape:
            start, stop = rows.indices(shape[0])[:2]
            stop = max(stop, start)
            offset += start * stride[0]
            shape = (stop - start, *shape[1:])
        if any(s < 0 for s in stride) or len(stride) != len(shape):
            raise CheckpointError(f"{self.remote.filename}: tensor {name} has an unsupported layout")
        count = 0 if math.prod(shape) == 0 else 1 + sum((d - 1) * s for d, s in zip(shape, stride, strict=True))
        member = f"{self._prefix}data/{ref.key}"
        info = self._infos.get(member)
        if info is None or (offset + count) * item > info.file_size:
            raise CheckpointError(f"{self.remote.filename}: tensor {name} lies outside its storage record")
        data = self._record(member, offset * item, (offset + count) * item) if count else b""
        flat = np.frombuffer(data, dtype=np_dtype)
        if ref.storage == "BFloat16Storage":
            flat = (flat.astype(np.uint32) << 16).view(np.float32)
            item = 4
        view = np.lib.stride_tricks.as_strided(flat, shape, tuple(s * item for s in stride)) if count else flat.reshape(shape)
        return np.array(view)

    def commit(self) -> None:
        """Keep what was fetched (see :meth:`HubFile.commit`)."""
        self.remote.commit()
