"""Option types and help texts shared by several commands."""

from __future__ import annotations

import re
from enum import Enum
from pathlib import Path


class OutputFormat(str, Enum):
    table = "table"
    csv = "csv"
    json = "json"


#: Text outputs by extension (``-o FILE``): the format each one is written in.
TEXT_EXTENSIONS = {".txt": "table", ".csv": "csv", ".json": "json"}


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
    """Benchmarks of the ALBERT table (:data:`posviz.compare.reference.METRICS`)."""

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
