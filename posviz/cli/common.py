"""Output writers shared by commands: JSON, CSV, file or stdout."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any


def _json_default(x: Any) -> Any:
    if hasattr(x, "item"):
        return x.item()
    if isinstance(x, Path):
        return str(x)
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


def _clean(value: Any) -> Any:
    # JSON has no NaN: write null so that every JSON reader accepts the file.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def to_json(rows: Iterable[dict[str, Any]]) -> str:
    """Rows as a JSON list (NaN written as null)."""
    return json.dumps([{k: _clean(v) for k, v in r.items()} for r in rows], indent=2, default=_json_default) + "\n"


def to_csv(rows: Sequence[dict[str, Any]]) -> str:
    """Rows as CSV with a header (lists joined with ':')."""
    buf = io.StringIO()
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    w = csv.DictWriter(buf, fieldnames=keys, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ":".join(map(str, v)) if isinstance(v, (list, tuple)) else v for k, v in r.items()})
    return buf.getvalue()


def emit(text: str, output: Path | None) -> None:
    """Write text to a file atomically, or to stdout."""
    if output is None:
        import sys

        sys.stdout.write(text)
        return
    from posviz.util.atomic import write_text_atomic

    write_text_atomic(output, text)
