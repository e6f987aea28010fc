"""Numeric arrays inside the explorer page: little-endian typed arrays in base64, as plotly.js reads them.

A float64 ``n x n`` matrix written as JSON text takes about 20 bytes a number; as a
base64 ``Float32Array`` it takes 5.3, and the browser decodes it without parsing
numbers. The spec ``{"dtype": "f4", "shape": [n, n], "bdata": "..."}`` is plotly's
own typed-array convention (plotly.py 6 writes figures this way), so a reader that
knows plotly can decode it, and :func:`decode_array` does it here (the tests use it).
``f2`` (IEEE half precision) is used only for the head factors of large models, where
the size budget asks for it (see docs/explore.md).
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np

#: Our dtype codes (plotly's) -> little-endian numpy dtypes.
DTYPES = {"f4": "<f4", "f2": "<f2", "i4": "<i4", "u1": "u1"}


def encode_array(values: Any, dtype: str = "f4") -> dict[str, Any]:
    """A JSON-ready typed-array spec of ``values``.

    Parameters
    ----------
    values
        Any array-like; written in C order.
    dtype
        ``f4`` (float32, the default), ``f2`` (float16), ``i4`` or ``u1``.

    Returns
    -------
    dict
        ``{"dtype", "shape", "bdata"}``; non-finite values are kept (the page shows them as gaps).

    Examples
    --------
    >>> spec = encode_array([[1.0, 2.0], [3.0, 4.0]])
    >>> spec["dtype"], spec["shape"]
    ('f4', [2, 2])
    >>> decode_array(spec).tolist()
    [[1.0, 2.0], [3.0, 4.0]]
    """
    a = np.ascontiguousarray(np.asarray(values), dtype=DTYPES[dtype])
    return {"dtype": dtype, "shape": list(a.shape), "bdata": base64.b64encode(a.tobytes()).decode("ascii")}


def decode_array(spec: dict[str, Any]) -> np.ndarray:
    """The array a spec written by :func:`encode_array` holds (float64 for float codes)."""
    raw = np.frombuffer(base64.b64decode(spec["bdata"]), dtype=DTYPES[spec["dtype"]])
    shape = spec["shape"]
    if isinstance(shape, str):  # plotly.py writes "n, m"
        shape = [int(x) for x in shape.split(",")]
    out = raw.reshape(shape)
    return out.astype(np.float64) if spec["dtype"].startswith("f") else out


def nbytes(spec: Any) -> int:
    """Bytes of base64 text in a spec, or in every spec nested in lists and dicts."""
    if isinstance(spec, dict):
        if "bdata" in spec:
            return len(spec["bdata"])
        return sum(nbytes(v) for v in spec.values())
    if isinstance(spec, list):
        return sum(nbytes(v) for v in spec)
    return 0
