"""Helpers shared by commands: options, output formats, progress."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from enum import Enum
from pathlib import Path
from typing import TypeVar

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
