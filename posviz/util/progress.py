"""Progress bars on stderr: for loops over several models or layers, and for bytes fetched."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

T = TypeVar("T")
_QUIET = threading.local()


@contextlib.contextmanager
def quiet_bytes() -> Iterator[None]:
    """No byte bars from this thread (workers fetching concurrently under one bar over the models)."""
    _QUIET.on = True
    try:
        yield
    finally:
        _QUIET.on = False


def progress(items: Sequence[T], description: str) -> Iterator[T]:
    """Iterate with a progress bar on stderr when there is more than one item.

    The bar (rich) names the current item and disappears when the loop ends, so
    it never mixes with the command's output.
    """
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


@contextlib.contextmanager
def byte_progress(total: int, description: str) -> Iterator[Callable[[int], None]]:
    """A bar on stderr counting bytes, when stderr is a terminal; yields ``advance(n)``.

    Like :func:`progress`, the bar (rich) disappears when done. Off a terminal
    nothing is drawn and ``advance`` does nothing.
    """
    if not sys.stderr.isatty() or total <= 0 or getattr(_QUIET, "on", False):
        yield lambda n: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TaskProgressColumn, TextColumn, TransferSpeedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(), DownloadColumn(binary_units=True), TransferSpeedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n: bar.advance(task, n)


def count_bar(*, status: bool = False, transient: bool = True):
    """A rich progress display on stderr counting items: description, bar, done/total, elapsed, remaining.

    ``status``: a last column showing each task's ``status`` field (``posviz train``'s loss and evaluation);
    ``transient``: the bar disappears when done. Start it with ``with`` (or ``start()``/``stop()``).
    """
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn()]
    if status:
        columns.append(TextColumn("{task.fields[status]}"))
    return Progress(*columns, console=Console(stderr=True), transient=transient)


@contextlib.contextmanager
def count_progress(total: int, description: str) -> Iterator[Callable[[int], None]]:
    """A bar on stderr counting items (blocks of text, say), when stderr is a terminal; yields ``update(done)``.

    ``update`` takes the number done so far. Off a terminal nothing is drawn.
    """
    if not sys.stderr.isatty() or total <= 1:
        yield lambda done: None
        return
    with count_bar() as bar:
        task = bar.add_task(description, total=total)
        yield lambda done: bar.update(task, completed=done)
