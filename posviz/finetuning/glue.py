"""GLUE tasks (``glue/NAME``) through the ``datasets`` library, scored on the validation split.

Where the data comes from, in order:

1. ``POSVIZ_GLUE_DIR``, when set: ``$POSVIZ_GLUE_DIR/NAME``, a ``DatasetDict`` saved
   with ``save_to_disk`` (a copy made once on a machine with network, for offline
   machines and clusters);
2. ``datasets.load_dataset("nyu-mll/glue", NAME)``: the ``datasets`` cache, else the
   Hub. With ``HF_HUB_OFFLINE``/``HF_DATASETS_OFFLINE`` set and no cached copy, or
   with the Hub unreachable, this fails at once with one ``error:`` line.

Metrics are GLUE's: accuracy (SST-2, MNLI, QNLI, RTE), F1 and accuracy (MRPC, QQP),
Matthews correlation (CoLA), Pearson and Spearman correlations (STS-B, regression).
MNLI is scored on ``validation_matched`` and ``validation_mismatched`` (metrics
``accuracy`` and ``accuracy_mismatched``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from posviz.finetuning.taskdata import GLUE_NAMES, Example, TaskData, TaskError

#: The dataset id on the Hub.
GLUE_ID = "nyu-mll/glue"
#: Environment variable naming a folder of ``save_to_disk`` copies, one per task.
GLUE_DIR_ENV = "POSVIZ_GLUE_DIR"

#: name -> (text column, pair column, number of classes (1: regression), metrics, dev splits by suffix)
SPECS: dict[str, tuple[str, str | None, int, tuple[str, ...], dict[str, str]]] = {
    "sst2": ("sentence", None, 2, ("accuracy",), {"": "validation"}),
    "mnli": ("premise", "hypothesis", 3, ("accuracy",), {"": "validation_matched", "mismatched": "validation_mismatched"}),
    "qqp": ("question1", "question2", 2, ("f1", "accuracy"), {"": "validation"}),
    "stsb": ("sentence1", "sentence2", 1, ("pearson", "spearman"), {"": "validation"}),
    "cola": ("sentence", None, 2, ("matthews",), {"": "validation"}),
    "mrpc": ("sentence1", "sentence2", 2, ("f1", "accuracy"), {"": "validation"}),
    "qnli": ("question", "sentence", 2, ("accuracy",), {"": "validation"}),
    "rte": ("sentence1", "sentence2", 2, ("accuracy",), {"": "validation"}),
}
assert tuple(SPECS) == GLUE_NAMES


def _offline() -> bool:
    return any(os.environ.get(v, "").strip().lower() in ("1", "on", "yes", "true") for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _cached(name: str) -> bool:
    """Whether the ``datasets`` cache (prepared Arrow files) or the Hub cache (the repository's files) has the task."""
    import datasets

    from posviz.read.sources import hf_cache_dir

    prepared = Path(os.environ.get("HF_DATASETS_CACHE") or datasets.config.HF_DATASETS_CACHE) / GLUE_ID.replace("/", "___") / name
    repository = Path(hf_cache_dir()) / ("datasets--" + GLUE_ID.replace("/", "--"))
    return prepared.is_dir() or repository.is_dir()


def _load(name: str, spec: str) -> Any:
    """The task's ``DatasetDict``: a local copy, the ``datasets`` cache, or the Hub."""
    import datasets

    datasets.utils.logging.set_verbosity_error()
    datasets.disable_progress_bars()
    local = os.environ.get(GLUE_DIR_ENV)
    if local:
        folder = Path(local) / name
        if not folder.is_dir():
            raise TaskError(f"task {spec}: {GLUE_DIR_ENV} is set but {folder} does not exist",
                            f"save the task there with datasets.load_dataset({GLUE_ID!r}, {name!r}).save_to_disk(...)")
        try:
            return datasets.load_from_disk(str(folder))
        except Exception as e:  # datasets raises FileNotFoundError or its own errors for a damaged copy
            raise TaskError(f"task {spec}: cannot read the copy in {folder}: {_first_line(e)}") from None
    hint = f"connect once to cache it, or point {GLUE_DIR_ENV} at save_to_disk copies"
    if not _offline():
        try:
            from huggingface_hub import dataset_info

            dataset_info(GLUE_ID, timeout=10)  # fail fast when the Hub cannot be reached
        except Exception as e:
            raise TaskError(f"task {spec}: the Hub cannot be reached for {GLUE_ID} ({_first_line(e)})", hint) from None
    offline = "offline (HF_HUB_OFFLINE/HF_DATASETS_OFFLINE) and no cached copy"
    if _offline() and not _cached(name):  # datasets would retry the network (it reads the variables at import)
        raise TaskError(f"task {spec}: cannot load {GLUE_ID} {name}: {offline}", hint)
    try:
        return datasets.load_dataset(GLUE_ID, name)
    except Exception as e:
        raise TaskError(f"task {spec}: cannot load {GLUE_ID} {name}: {offline if _offline() else _first_line(e)}", hint) from None


def load_glue(spec: str) -> TaskData:
    """Read ``glue/NAME`` into train and dev examples (labels: class ids; STS-B: floats)."""
    name = spec.removeprefix("glue/")
    if name not in SPECS:
        raise TaskError(f"unknown GLUE task {name!r}", f"choose one of {', '.join(GLUE_NAMES)}")
    text, pair, classes, metrics, splits = SPECS[name]
    ds = _load(name, spec)

    def examples(split: str) -> list[Example]:
        if split not in ds:
            raise TaskError(f"task {spec}: the dataset has no {split} split (it has {', '.join(ds)})")
        part = ds[split]
        missing = [c for c in (text, pair, "label") if c is not None and c not in part.column_names]
        if missing:
            raise TaskError(f"task {spec}: the {split} split has no {', '.join(missing)} column")
        pairs = part[pair] if pair else [None] * len(part)
        convert = float if classes == 1 else int
        return [Example(t, p, convert(y)) for t, p, y in zip(part[text], pairs, part["label"], strict=True)]

    train = examples("train")
    labels = None if classes == 1 else list(range(classes))
    dev = {suffix: examples(split) for suffix, split in splits.items()}
    return TaskData(spec, train, dev, labels, metrics, {"dataset": GLUE_ID, "config": name})
