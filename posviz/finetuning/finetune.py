"""``posviz.finetune``: sources × checkpoints × tasks × seeds, finished results reused, medians over seeds.

For each checkpoint and task one results document (:mod:`~posviz.finetuning.results`)
holds the records of every seed run so far and the settings they were made with.
A rerun with the same settings reuses the finished seeds and runs only the
missing ones; a document written with other settings is refused unless
``overwrite`` (it is then replaced). A seed interrupted midway is started afresh,
or continued from its last Trainer checkpoint with ``resume``. The document is
rewritten atomically after every seed, by the main process only under ``torchrun``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from posviz.errors import OptionError, SourceError
from posviz.finetuning.loop import FinetuneSettings
from posviz.finetuning.results import SCORE, median_records, read_document, results_path, task_slug, write_document
from posviz.finetuning.targets import Target, resolve_targets
from posviz.finetuning.taskdata import TaskData
from posviz.finetuning.tasks import check_spec, load_task
from posviz.train.corpus import check_same_corpus
from posviz.train.processes import checked_alike


def _tokenizer(target: Target) -> Any:
    from transformers import AutoTokenizer

    from posviz.read.sources import ensure_hub_reachable, hub_offline

    try:
        return AutoTokenizer.from_pretrained(target.tokenizer, revision=target.revision)
    except (OSError, ValueError) as e:
        if target.step is None and not Path(target.tokenizer).exists() and not hub_offline():
            ensure_hub_reachable(target.tokenizer, "the tokenizer is")
        why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise SourceError(f"{target.source}: cannot load its tokenizer ({why})",
                          "offline, a hub model must be in the local Hugging Face cache (HF_HUB_OFFLINE)") from None


#: How a run trained with ``--objective causal`` is fine-tuned, recorded in its results' settings (its causal mask kept).
CAUSAL_POOLING = "last real token (causal run: its causal mask kept)"


def _checked_config(target: Target, settings: FinetuneSettings) -> tuple[int, str | None]:
    """The target's longest input (``max_length`` capped by its positions) and, for a causal run, its pooling.

    Refuses decoder-only models first. A ``posviz train --objective causal`` run is
    fine-tuned with its causal mask on its last real token
    (:class:`~posviz.models.PosvizForSequenceClassification`): the pooling is then a
    setting of its results, so they are never mixed with first-token ones.
    """
    from transformers import AutoConfig

    import posviz.models  # noqa: F401  (registers posviz-albert)
    from posviz.errors import UnsupportedModelError
    from posviz.finetuning.loop import DECODER_HINT, is_decoder_only

    try:
        config = AutoConfig.from_pretrained(target.model, revision=target.revision)
    except (OSError, ValueError) as e:
        raise SourceError(f"{target.source}: cannot read its config.json ({str(e).strip().splitlines()[0]})") from None
    if is_decoder_only(config):
        raise UnsupportedModelError(f"{target.source}: {config.model_type} is a decoder-only (causal) model; "
                                    "posviz finetune fine-tunes bidirectional encoders on their first ([CLS]) token", DECODER_HINT)
    positions = getattr(config, "max_position_embeddings", None)
    from posviz.read.families import POSVIZ_MODEL_TYPE

    pooling = CAUSAL_POOLING if config.model_type == POSVIZ_MODEL_TYPE and getattr(config, "is_causal", False) else None
    return min(x for x in (settings.max_length, positions) if isinstance(x, int) and x > 0), pooling


def _document(target: Target, data: TaskData, settings: dict[str, Any], records: list[dict[str, Any]]) -> dict[str, Any]:
    from posviz import __version__

    return {"source": target.source, "checkpoint": target.checkpoint, "step": target.step, "task": data.task,
            "metrics": [*data.metric_names(), SCORE], "settings": settings, "posviz_version": __version__,
            "records": [*records, *median_records(records)]}


def _finished(path: Path, settings: dict[str, Any], overwrite: bool) -> list[dict[str, Any]]:
    """The per-seed records already in ``path`` made with ``settings`` (raises if made with others)."""
    doc = read_document(path) if path.is_file() else None
    if doc is None:
        return []
    if doc.get("settings") != settings:
        if overwrite:
            return []
        old = doc.get("settings") or {}
        check_same_corpus(old.get("task") or {}, settings.get("task") or {}, str(path))  # the one line naming both hashes
        changed = sorted(k for k in {*old, *settings} if old.get(k) != settings.get(k))
        raise OptionError(f"{path} holds results made with other settings ({', '.join(changed)} differ)",
                          "pass --overwrite to replace them, or write elsewhere (--out for models that are not runs)")
    return [r for r in doc["records"] if r.get("seed") != "median"]


def _seed_records(target: Target, data: TaskData, seed: int, metrics: dict[str, float]) -> list[dict[str, Any]]:
    base = {"source": target.source, "checkpoint": target.checkpoint, "step": target.step, "task": data.task, "seed": seed}
    values = {**metrics, SCORE: sum(metrics.values()) / len(metrics)}
    return [{**base, "metric": name, "value": float(value)} for name, value in values.items()]


def finetune(
    sources: str | os.PathLike | Sequence[str | os.PathLike],
    *,
    tasks: str | Sequence[str],
    seeds: Sequence[int] = (0,),
    checkpoints: str | Sequence[int] | None = None,
    steps: int | None = None,
    epochs: float = 3.0,
    lr: float = 1e-4,
    batch_size: int = 32,
    max_length: int = 128,
    precision: str = "auto",
    train_size: int | None = None,
    dev_size: int | None = None,
    corpus: Sequence[str] | None = None,
    out: str | os.PathLike | None = None,
    resume: bool = False,
    overwrite: bool = False,
    on_update: Callable[[str, dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Fine-tune every checkpoint of ``sources`` on every task with every seed; return the records.

    Parameters
    ----------
    sources
        ``posviz train`` run folders (newest complete checkpoint), ``RUN@STEP``,
        model folders or hub ids (see :mod:`posviz.finetuning.targets`); one, or a list.
    tasks
        One task spec, or a list of them: ``glue/NAME``, ``csv:PATH[,DEV]``, ``jsonl:PATH[,DEV]``,
        ``builtin/bshift``, ``builtin/shuffled``, ``builtin/replaced`` (see docs/finetune.md).
    seeds
        Fine-tuning seeds; medians are taken over them.
    checkpoints
        For runs: ``"all"`` kept checkpoints, or a list of steps.
    steps, epochs, lr, batch_size, max_length, precision, train_size, dev_size, corpus
        Settings (:class:`~posviz.finetuning.loop.FinetuneSettings`).
    out
        Results folder of models that are not runs (default ``finetune-results``).
    resume
        Continue interrupted seeds from their last Trainer checkpoint.
    overwrite
        Replace results made with other settings instead of refusing.
    on_update
        Called with ``("start"|"reused"|"done", info)`` per (checkpoint, task, seed).

    Returns
    -------
    list of dict
        One record per checkpoint, task, seed and metric (``source``,
        ``checkpoint``, ``step``, ``task``, ``seed``, ``metric``, ``value`` in
        percent; every task has ``score``), then one ``"median"`` record per
        checkpoint, task and metric (with ``min``, ``max``, ``n``).
    """
    from posviz.finetuning.loop import quiet_transformers

    if isinstance(sources, (str, os.PathLike)):  # one source, not its characters
        sources = [sources]
    if isinstance(tasks, str):
        tasks = [tasks]
    seeds = list(dict.fromkeys(int(s) for s in seeds))
    if not tasks or not seeds:
        raise OptionError("give at least one --task and one seed", "for example --task builtin/bshift --seeds 0,1,2")
    settings = FinetuneSettings(steps, float(epochs), float(lr), int(batch_size), int(max_length), precision,
                                train_size, dev_size, tuple(corpus) if corpus else None)
    with checked_alike():  # under torchrun the main process alone reports these
        for spec in tasks:  # unknown task names fail before any model is loaded
            check_spec(spec)
        targets = resolve_targets([str(s) for s in sources], checkpoints if checkpoints in (None, "all")
                                  else [int(s) for s in checkpoints], out)  # type: ignore[union-attr]
    quiet_transformers()
    records: list[dict[str, Any]] = []
    for target in targets:
        with checked_alike():
            length, pooling = _checked_config(target, settings)
            tokenizer = _tokenizer(target)
        if 0 < tokenizer.model_max_length < length:
            length = tokenizer.model_max_length
        for spec in tasks:
            records += _one_task(target, tokenizer, length, spec, seeds, settings, resume, overwrite, on_update, pooling)
    return [*records, *median_records(records)]


def _one_task(target: Target, tokenizer: Any, length: int, spec: str, seeds: list[int], settings: FinetuneSettings,
              resume: bool, overwrite: bool, on_update: Callable[[str, dict[str, Any]], None] | None,
              pooling: str | None = None) -> list[dict[str, Any]]:
    """The records of ``seeds`` on one (checkpoint, task): reused where finished, else fine-tuned now.

    ``pooling``: recorded in the settings when it is not the first token's (causal runs).
    """
    from posviz.finetuning.loop import finetune_seed, world
    from posviz.train.processes import decided_by_main

    builtin = spec.startswith("builtin/")  # only built-in tasks read a corpus: it is a setting of theirs alone
    corpus = list(settings.corpus or target.corpus or ()) or None if builtin else None
    with checked_alike():  # a bad file, column or split
        data = load_task(spec, train_size=settings.train_size, dev_size=settings.dev_size, corpus=corpus,
                         fits=lambda text: len(tokenizer(text, truncation=False)["input_ids"]) <= length)
    path = results_path(target.root, spec, target.step)
    args = world(settings, target.root)
    recorded = {**settings.to_json(), "corpus": corpus, "max_length": length, "world_size": args.world_size,
                "task": data.details, **({"pooling": pooling} if pooling else {})}
    kept = decided_by_main(args, lambda: _finished(path, recorded, overwrite))
    done = {r["seed"] for r in kept}
    main = args.process_index == 0
    work_root = path.parent / ".work" / task_slug(spec)
    for seed in seeds:
        info = {"source": target.source, "step": target.step, "task": spec, "seed": seed}
        if seed in done:
            if on_update and main:
                on_update("reused", info)
            continue
        if on_update and main:
            on_update("start", info)
        metrics = finetune_seed(target.model, tokenizer, data, seed, settings, work_root / f"seed-{seed}",
                                resume=resume, label=target.source, revision=target.revision)
        kept += _seed_records(target, data, seed, metrics)
        if main:
            write_document(path, _document(target, data, recorded, kept))
            shutil.rmtree(work_root / f"seed-{seed}", ignore_errors=True)
            if on_update:
                on_update("done", {**info, "metrics": metrics})
    if main:
        for folder in (work_root, work_root.parent):  # the work folders, once no seed is left unfinished
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
    return [r for r in kept if r["seed"] in seeds]
