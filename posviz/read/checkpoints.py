"""Read a checkpoint's config and only the tensors needed, never the whole model.

safetensors files are read through ``safe_open``/``get_slice`` (row slices read
only those rows); bfloat16, which numpy lacks, is decoded from the file's
documented byte layout. ``.bin`` files go through
``torch.load(weights_only=True, mmap=True)``, so nothing in them is executed and
only touched pages are read. Sharded checkpoints are resolved through their
index so that only the shard holding a tensor is opened (or fetched). Hub files
missing from the local caches are read by HTTP byte ranges
(:mod:`posviz.hub.safetensors_ranges`, :mod:`posviz.hub.torch_zip`).
"""

from __future__ import annotations

import json
import struct
import sys
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from posviz.errors import CheckpointError
from posviz.read.families import suffix_matches
from posviz.read.sources import Source


class _SafetensorsFile:
    """One safetensors file opened lazily, with clean errors for corrupt files."""

    def __init__(self, path: Path) -> None:
        from safetensors import safe_open

        self.path = path
        try:
            self._f = safe_open(str(path), framework="numpy")
            self._names = list(self._f.keys())
        except Exception as e:  # SafetensorError, OSError, ...
            raise CheckpointError(f"{path.name} is not a valid safetensors file: {_first_line(e)}") from None
        self._header: dict[str, Any] | None = None

    def names(self) -> list[str]:
        return self._names

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._f.get_slice(name).get_shape())

    def dtype(self, name: str) -> str:
        return str(self._f.get_slice(name).get_dtype())

    def read(self, name: str, rows: slice | None) -> np.ndarray:
        sl = self._f.get_slice(name)
        try:
            if sl.get_dtype() == "BF16":
                return self._read_bf16(name, rows)
            if not sl.get_shape():  # a scalar (a plugin scheme's learned constant): nothing to slice
                return np.asarray(self._f.get_tensor(name))
            return np.asarray(sl[rows] if rows is not None else sl[:])
        except CheckpointError:
            raise
        except Exception as e:
            raise CheckpointError(f"{self.path.name}: cannot read tensor {name}: {_first_line(e)}") from None

    def _read_bf16(self, name: str, rows: slice | None) -> np.ndarray:
        # bfloat16 is the upper half of a float32: widen the bits, no precision lost.
        if self._header is None:
            with open(self.path, "rb") as fh:
                (size,) = struct.unpack("<Q", fh.read(8))
                self._header = json.loads(fh.read(size))
                self._header["__data_start__"] = 8 + size
        entry = self._header[name]
        shape = tuple(entry["shape"])
        begin, _ = entry["data_offsets"]
        row = int(np.prod(shape[1:], dtype=np.int64)) if len(shape) > 1 else 1
        start, stop = (0, shape[0] if shape else 1) if rows is None else rows.indices(shape[0])[:2]
        count = max(stop - start, 0) * row
        offset = self._header["__data_start__"] + begin + start * row * 2
        bits = np.fromfile(self.path, dtype="<u2", count=count, offset=offset)
        if bits.size != count:
            raise CheckpointError(f"{self.path.name}: tensor {name} is truncated")
        out = (bits.astype(np.uint32) << 16).view(np.float32)
        return out.reshape((stop - start, *shape[1:]) if shape else ())


class _TorchFile:
    """A ``.bin``/``.pt`` state dict, loaded with ``weights_only=True`` and mmap."""

    def __init__(self, path: Path) -> None:
        import torch

        self.path = path
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # torch warns about pickle protocols; the error says enough
                try:
                    obj = torch.load(str(path), map_location="cpu", weights_only=True, mmap=True)
                except RuntimeError as e:
                    if "mmap" not in str(e):
                        raise
                    obj = torch.load(str(path), map_location="cpu", weights_only=True)  # legacy format
        except Exception as e:
            reason = _first_line(e)
            if "Weights only load failed" in str(e):
                reason = "it holds objects other than tensors, which posviz never unpickles (weights_only=True)"
            raise CheckpointError(f"{path.name} is not a readable PyTorch checkpoint: {reason}") from None
        # Some training scripts nest the weights one level down.
        for key in ("state_dict", "model", "module"):
            if isinstance(obj, dict) and isinstance(obj.get(key), dict) and not any(isinstance(v, torch.Tensor) for v in obj.values()):
                obj = obj[key]
        if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
            raise CheckpointError(f"{path.name} does not hold a state dict of tensors")
        self._sd = obj

    def names(self) -> list[str]:
        return list(self._sd)

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._sd[name].shape)

    def dtype(self, name: str) -> str:
        return str(self._sd[name].dtype).replace("torch.", "")

    def read(self, name: str, rows: slice | None) -> np.ndarray:
        import torch

        t = self._sd[name]
        if rows is not None:
            t = t[rows]
        return t.to(torch.float64).numpy() if t.is_floating_point() else t.numpy()


def _is_float(dtype: str) -> bool:
    # safetensors names (F16, BF16, F32, F64) and torch names (float16, bfloat16, ...)
    return dtype.upper() in {"F16", "BF16", "F32", "F64"} or dtype.startswith(("float", "bfloat"))


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


def _open_weight_file(source: Source, filename: str):
    where = source.locate(filename)
    if isinstance(where, Path):
        return _SafetensorsFile(where) if where.suffix == ".safetensors" else _TorchFile(where)
    # A Hub file read by byte ranges (posviz.hub.remote).
    if filename.endswith(".safetensors"):
        from posviz.hub.safetensors_ranges import RemoteSafetensors

        return RemoteSafetensors(where)
    from posviz.hub.torch_zip import RemoteTorchZip, is_zip

    if is_zip(where):
        return RemoteTorchZip(where)
    print(f"posviz: {filename} of {source.label} is a legacy (non-zip) PyTorch file, which cannot be read by ranges: "
          "downloading it whole", file=sys.stderr)
    return _TorchFile(source.fetch(filename))


class Checkpoint:
    """Read-only access to one checkpoint's tensors by name or name suffix.

    Parameters
    ----------
    source
        A resolved :class:`~posviz.read.sources.Source`.

    Notes
    -----
    Nothing is read at construction beyond the weight index: tensor names come
    from ``*.index.json`` for sharded checkpoints, or from the one weight file's
    header otherwise.
    """

    def __init__(self, source: Source) -> None:
        self.source = source
        self.config: dict[str, Any] = source.config
        self._files: dict[str, Any] = {}
        first = source.files[0]
        if first.endswith(".index.json"):
            idx_path = source.fetch(first)
            try:
                weight_map = json.loads(idx_path.read_text(encoding="utf-8"))["weight_map"]
                if not isinstance(weight_map, dict):
                    raise TypeError("weight_map is not an object")
            except Exception as e:
                raise CheckpointError(f"{first} is not a valid weight index: {_first_line(e)}") from None
            self._where: dict[str, str] = {str(k): str(v) for k, v in weight_map.items()}
        else:
            self._where = {name: first for name in self._file(first).names()}

    def _file(self, filename: str):
        if filename not in self._files:
            try:
                self._files[filename] = _open_weight_file(self.source, filename)
            except CheckpointError as e:
                raise CheckpointError(f"{self.source.label}: {e.message}", e.hint) from None
        return self._files[filename]

    def names(self) -> list[str]:
        """All tensor names in the checkpoint."""
        return list(self._where)

    def find(self, suffix: str) -> str | None:
        """The tensor name ending with ``suffix`` (shortest match), or ``None``."""
        hits = [n for n in self._where if suffix_matches(n, suffix)]
        return min(hits, key=len) if hits else None

    def require(self, suffix: str, what: str = "tensor") -> str:
        """Like :meth:`find` but raise a clear error when nothing matches."""
        name = self.find(suffix)
        if name is None:
            raise CheckpointError(f"{self.source.label}: no {what} ending in {suffix!r} in the checkpoint")
        return name

    def opened(self) -> dict[str, Any]:
        """The weight files opened so far, by name (local readers, or Hub readers with their ``remote``)."""
        return dict(self._files)

    def files_for(self, names: Iterable[str]) -> list[str]:
        """Weight files that hold the given tensors (what :meth:`read` would fetch)."""
        return sorted({self._where[n] for n in names})

    def shape(self, name: str) -> tuple[int, ...]:
        """Shape of a tensor (reads only the header)."""
        return self._file(self._where[name]).shape(name)

    def dtype(self, name: str) -> str:
        """Stored dtype of a tensor, e.g. ``F32``, ``BF16`` or ``float16``."""
        return self._file(self._where[name]).dtype(name)

    def read(self, name: str, rows: slice | None = None) -> np.ndarray:
        """Read one tensor (optionally a slice of its first axis) as float64.

        Raises
        ------
        CheckpointError
            If the tensor is missing from its file or cannot be decoded.
        """
        if name not in self._where:
            raise CheckpointError(f"{self.source.label}: no tensor {name!r} in the checkpoint")
        f = self._file(self._where[name])
        if name not in f.names():
            raise CheckpointError(f"{self.source.label}: the index lists {name} in {self._where[name]}, but the file lacks it")
        dtype = f.dtype(name)
        if not _is_float(dtype):
            raise CheckpointError(f"{self.source.label}: tensor {name} has dtype {dtype}, not a floating-point type")
        try:
            with np.errstate(invalid="ignore", over="ignore"):  # NaN/Inf are reported by the caller
                out = np.asarray(f.read(name, rows), dtype=np.float64)
            if hasattr(f, "commit"):  # a Hub file read by ranges: keep the slices, now that they decoded
                f.commit()
            return out
        except CheckpointError as e:
            raise CheckpointError(f"{self.source.label}: {e.message}", e.hint) from None
