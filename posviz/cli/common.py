"""Helpers shared by commands: options, output formats, progress."""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Iterable, Iterator, Sequence
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


class OutputFormat(str, Enum):
    table = "table"
    csv = "csv"
    json = "json"


class Normalize(str, Enum):
    none = "none"
    cosine = "cosine"
    center = "center"


HELP_MODELS = "Model folders, weight files, hub ids (org/name[@rev]) or controls (sinusoidal[:NxD], gaussian[:NxD][:SEED])."
HELP_POSITIONS = "Positions to keep, A:B (counted from position 0, after any row offset such as RoBERTa's)."
HELP_TABLE = "Position table for models with several (BART: encoder or decoder)."


def slug(text: str) -> str:
    """File-name-safe version of a model id."""
    text = text.rstrip("/").split("/")[-1] if Path(text).exists() else text
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "model"


def progress(items: Sequence[T], description: str) -> Iterator[T]:
    """Iterate with a progress bar on stderr when there is more than one item."""
    if len(items) <= 1:
        yield from items
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=len(items))
        for item in items:
            bar.update(task, description=f"{description} {item}")
            yield item
            bar.advance(task)


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
