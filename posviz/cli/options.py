"""Option types and help texts shared by several commands."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from enum import Enum
from pathlib import Path
from typing import Any


class OutputFormat(str, Enum):
    table = "table"
    csv = "csv"
    json = "json"


#: Text outputs by extension (``-o FILE``): the format each one is written in.
TEXT_EXTENSIONS = {".txt": "table", ".csv": "csv", ".json": "json"}


class Device(str, Enum):
    """Where a model runs (``--device``)."""

    cpu = "cpu"
    cuda = "cuda"


def split_outputs(paths: list[Path] | None, *, force: bool = True, plot: Path | None = None) -> tuple[list[Path], list[tuple[Path, str]]]:
    """Split ``-o`` paths (and a ``--plot`` figure) into figures and text files, validating each before any work.

    Parameters
    ----------
    paths
        The ``-o`` paths: a figure or a text file each, by extension (:data:`TEXT_EXTENSIONS`).
    force
        False: an existing file is refused (``--force`` replaces it).
    plot
        A path that must be a figure.

    Returns
    -------
    tuple
        The figure paths, and ``(path, format)`` of each text output.
    """
    from posviz.errors import OptionError
    from posviz.plots.common import FIGURE_EXTENSIONS
    from posviz.util.atomic import check_output_path

    figures, texts = [], []
    for p in [*(paths or []), *([plot] if plot is not None else [])]:
        check_output_path(p, FIGURE_EXTENSIONS if p is plot else (*FIGURE_EXTENSIONS, *TEXT_EXTENSIONS))
        if p.exists() and not force:
            raise OptionError(f"output {p} exists", "pass --force to replace it, or write elsewhere")
        if p.suffix.lower() in TEXT_EXTENSIONS:
            texts.append((p, TEXT_EXTENSIONS[p.suffix.lower()]))
        else:
            figures.append(p)
    return figures, texts


def rows_renderer(rows: Sequence[dict[str, Any]], table: Callable[[], str], csv_rows: Sequence[dict[str, Any]] | None = None
                  ) -> Callable[[str], str]:
    """``render(kind)`` of a command's rows: JSON, CSV (of ``csv_rows`` where the CSV is flatter) or its ``table()``."""
    from posviz.util.tables import to_csv, to_json

    def render(kind: str) -> str:
        if kind == "json":
            return to_json(rows)
        if kind == "csv":
            return to_csv(rows if csv_rows is None else csv_rows)
        return table()

    return render


def one_figure(make: Callable[[], Any], dpi: int) -> Callable[[Path], list[Path]]:
    """``draw(path)`` of a command with one figure: made by ``make()`` on first use, saved to every path."""
    made: list[Any] = []

    def draw(path: Path) -> list[Path]:
        from posviz.plots.common import save_figure

        if not made:
            made.append(make())
        save_figure(made[0], path, dpi=dpi)
        return [path]

    return draw


def write_outputs(texts: list[tuple[Path, str]], figures: list[Path], default: str, render: Callable[[str], str],
                  draw: Callable[[Path], Iterable[Path]] | None = None) -> None:
    """Write a command's outputs (from :func:`split_outputs`): each text in its format, each figure, and the
    ``default`` format to stdout when no text output is named. ``draw(path)`` writes one figure and returns the
    files it wrote (one per layer, for some). Each file written is named on stderr."""
    import typer

    from posviz.util.tables import emit

    for path, kind in texts:
        emit(render(kind), path)
        typer.echo(f"wrote {path}", err=True)
    for path in figures if draw is not None else ():
        for target in draw(path):
            typer.echo(f"wrote {target}", err=True)
    if not texts:
        emit(render(default), None)


class Precision(str, Enum):
    """Training precision of ``posviz train`` and ``posviz finetune`` (see :func:`posviz.train.options.precision_flags`)."""

    auto = "auto"
    fp32 = "fp32"
    bf16 = "bf16"
    fp16 = "fp16"


class Normalize(str, Enum):
    none = "none"
    cosine = "cosine"
    center = "center"


class Metric(str, Enum):
    """Benchmarks of the ALBERT table (:data:`posviz.reference.METRICS`)."""

    average = "average"
    mnli = "mnli"
    sst2 = "sst2"
    squad1 = "squad1"
    squad2 = "squad2"
    race = "race"


HELP_MODELS = "Model folders, weight files, hub ids (org/name[@rev]) or controls (sinusoidal[:NxD], gaussian[:NxD][:SEED])."
HELP_POSITIONS = "Positions to keep, A:B (counted from position 0, after any row offset such as RoBERTa's)."
HELP_TABLE = "Position table for models with several (BART: encoder or decoder)."
HELP_NORMALIZE = "none: E Eᵀ; cosine: unit rows; center: column means removed."
HELP_NULL_DRAWS = "Row permutations for the null baseline (0: none)."
HELP_VARIANT = ("Toeplitzness variant to headline (first column, axes, titles): off-diagonal R², the default, or the full R² "
                "over all n² entries, whose big Gram diagonal can hide the trend. Both are always in the output.")


def slug(text: str) -> str:
    """File-name-safe version of a model id."""
    text = text.rstrip("/").split("/")[-1] if Path(text).exists() else text
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "model"


def default_output(prefix: str, models: list[str], suffix: str) -> Path:
    """``PREFIX-MODEL.SUFFIX``, or ``PREFIX-MODEL-and-more.SUFFIX`` for several models."""
    return Path(f"{prefix}-{slug(models[0])}{'-and-more' if len(models) > 1 else ''}{suffix}")


def text_measures(names: list[str], corpus: str | None) -> tuple[str, ...]:
    """The ``--measure`` names of ``report`` and ``explore``, checked: registry measures that join the text pass, with a corpus."""
    from posviz.errors import OptionError
    from posviz.measures import get_measure, measures

    for name in names:
        measure = get_measure(name)
        if measure.report is not None and measure.request is not None:
            raise OptionError(f"--measure {name} has its own section", f"use --corpus or --{name}-corpus")
        if measure.request is None:
            able = [m.name for m in measures().values() if m.request is not None and m.report is None]
            raise OptionError(f"--measure {name} does not run on a text pass", f"choose one of {', '.join(able) or '(none installed)'}")
    if names and corpus is None:
        raise OptionError(f"--measure {names[0]} runs on text", "add --corpus FILE (or cpython-3.11.7-docstrings[:N])")
    return tuple(dict.fromkeys(names))
