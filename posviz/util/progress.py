"""A progress bar on stderr for loops over several models or layers."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TypeVar

T = TypeVar("T")


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
