"""Fine-tuning of one (checkpoint, task, seed) with transformers' ``Trainer``, then scoring on the dev splits.

The model is the checkpoint's encoder under a new classification head
(``AutoModelForSequenceClassification``: ``PosvizForSequenceClassification`` for
``posviz train`` checkpoints, ``AlbertForSequenceClassification``,
``BertForSequenceClassification``, ... for Hugging Face ones). Training is
AdamW with a linear warm-up over the first 10 % of the steps and linear decay,
weight decay 0.01, gradient clipping at 1 (the recipe of BERT's and ALBERT's GLUE
runs); the final model is scored, with no model selection on dev. Trainer
checkpoints in a work folder make an interrupted seed resumable
(:func:`finetune_seed`'s ``resume``). Under ``torchrun`` every process trains
(DDP) and gets the gathered dev predictions; the caller writes from the main one.
"""

from __future__ import annotations

import math
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from posviz.errors import OptionError, UnsupportedModelError
from posviz.finetuning.taskdata import Example, TaskData

#: The hint of a model that cannot be fine-tuned.
DECODER_HINT = "fine-tune an encoder: a posviz train run, or a BERT/ALBERT-style checkpoint"
#: Checkpoints written per seed (the last one is what --resume continues from).
SAVES_PER_SEED = 4


@dataclass(frozen=True)
class FinetuneSettings:
    """How every (checkpoint, task, seed) is fine-tuned; results are reused only under equal settings.

    Attributes
    ----------
    steps, epochs
        Optimizer steps, or (when ``steps`` is ``None``) passes over the training set.
    learning_rate, batch_size
        Peak learning rate; examples per step and process.
    max_length
        Longest input in tokens (also capped by the model's positions).
    precision
        ``auto``, ``fp32``, ``bf16`` or ``fp16`` (as ``posviz train --precision``).
    train_size, dev_size
        At most this many training / dev examples (``None``: all; built-in tasks: 4000 / 1000).
    corpus
        Corpus of the built-in tasks (``None``: the run's pre-training corpus, else :data:`posviz.train.corpus.DEMO_CORPUS`).
    """

    steps: int | None = None
    epochs: float = 3.0
    learning_rate: float = 1e-4
    batch_size: int = 32
    max_length: int = 128
    precision: str = "auto"
    train_size: int | None = None
    dev_size: int | None = None
    corpus: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        checks = [
            (self.steps is None or self.steps >= 1, "--steps must be at least 1"),
            (self.epochs > 0, "--epochs must be positive"),
            (self.learning_rate > 0, "--lr must be positive"),
            (self.batch_size >= 1, "--batch-size must be at least 1"),
            (self.max_length >= 8, "--max-length must be at least 8"),
            (self.precision in ("auto", "fp32", "bf16", "fp16"), f"unknown precision {self.precision!r}"),
        ]
        for ok, message in checks:
            if not ok:
                raise OptionError(message)

    def to_json(self) -> dict[str, Any]:
        """Plain JSON (the ``settings`` of a results document, with the task's details added by the caller)."""
        d = asdict(self)
        d["corpus"] = list(self.corpus) if self.corpus is not None else None
        if self.steps is not None:
            d["epochs"] = None  # --steps decides; the epochs default is not a setting then
        return d


def quiet_transformers() -> None:
    """No transformers logging or progress bars (loading weights, writing shards): posviz reports progress itself."""
    import os

    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def is_decoder_only(config: Any) -> bool:
    """True for causal language models with no encoder form (LLaMA, GPT-2, ...): not fine-tuned here.

    posviz fine-tunes encoders the way the papers it reproduces do (bidirectional
    attention, the first token pooled); a model type that transformers knows only
    as a causal LM (not as a masked LM) is refused.
    """
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    kind = getattr(config, "model_type", None)
    return bool(getattr(config, "is_decoder", False)) or (
        kind in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and kind not in MODEL_FOR_MASKED_LM_MAPPING_NAMES)


def load_classifier(model: str, num_labels: int, label: str, revision: str | None = None) -> Any:
    """``AutoModelForSequenceClassification`` of ``model`` with a new head of ``num_labels`` outputs.

    Raises
    ------
    UnsupportedModelError
        A decoder-only model, or a model type with no sequence-classification class.
    """
    from transformers import AutoConfig, AutoModelForSequenceClassification

    import posviz.models  # noqa: F401  (registers posviz-albert with the Auto classes)

    config = AutoConfig.from_pretrained(model, revision=revision, num_labels=num_labels)
    hint = DECODER_HINT
    if is_decoder_only(config):
        raise UnsupportedModelError(f"{label}: {config.model_type} is a decoder-only (causal) model; posviz finetune "
                                    "fine-tunes bidirectional encoders on their first ([CLS]) token", hint)
    if num_labels == 1:
        config.problem_type = "regression"
    quiet_transformers()  # "some weights were newly initialised" is expected: the head
    try:
        return AutoModelForSequenceClassification.from_pretrained(model, config=config, revision=revision)
    except ValueError as e:
        if "Unrecognized configuration class" not in str(e):
            raise
        raise UnsupportedModelError(f"{label}: {config.model_type} models have no sequence-classification class", hint) from None


def encode(tokenizer: Any, data: TaskData, examples: list[Example], max_length: int) -> list[dict[str, Any]]:
    """Tokenised examples (truncated to ``max_length``) with their targets, as a list Trainer can index."""
    texts = [e.text for e in examples]
    pairs = [e.text_pair for e in examples]
    if any(p is not None for p in pairs):
        enc = tokenizer(texts, [p or "" for p in pairs], truncation=True, max_length=max_length)
    else:
        enc = tokenizer(texts, truncation=True, max_length=max_length)
    keys = [k for k in enc.keys() if k in ("input_ids", "attention_mask", "token_type_ids")]
    return [{**{k: enc[k][i] for k in keys}, "labels": data.label_id(e.label)} for i, e in enumerate(examples)]


def total_steps(settings: FinetuneSettings, n_train: int, world_size: int) -> int:
    """Optimizer steps of one seed: ``--steps``, or ``--epochs`` passes of the global batch."""
    if settings.steps is not None:
        return settings.steps
    return max(1, math.ceil(settings.epochs * math.ceil(n_train / (settings.batch_size * world_size))))


def _flags(settings: FinetuneSettings) -> dict[str, Any]:
    from posviz.train.options import precision_flags
    from posviz.util.compat import pin_mixed_precision

    flags, _ = precision_flags(settings.precision)
    pin_mixed_precision(flags["bf16"], flags["fp16"])
    return flags


def world(settings: FinetuneSettings, folder: Path) -> Any:
    """``TrainingArguments`` that say this process's place (``world_size``, ``process_index``; joins ``torchrun``'s group)."""
    from transformers import TrainingArguments

    return TrainingArguments(output_dir=str(folder), report_to=[], **_flags(settings))


def training_arguments(settings: FinetuneSettings, work: Path, seed: int, n_train: int) -> Any:
    """The ``TrainingArguments`` of one seed (under ``torchrun``, their first use joins the process group)."""
    from transformers import TrainingArguments

    flags = _flags(settings)
    steps = total_steps(settings, n_train, world(settings, work).world_size)
    return TrainingArguments(
        output_dir=str(work), max_steps=steps, per_device_train_batch_size=settings.batch_size,
        per_device_eval_batch_size=max(settings.batch_size, 64), learning_rate=settings.learning_rate,
        warmup_steps=max(1, round(0.1 * steps)), lr_scheduler_type="linear", weight_decay=0.01,
        adam_epsilon=1e-6, max_grad_norm=1.0, eval_strategy="no", save_strategy="steps",
        save_steps=max(1, math.ceil(steps / SAVES_PER_SEED)), save_total_limit=1, logging_steps=max(1, steps // 10),
        seed=seed, data_seed=seed, report_to=[], disable_tqdm=True, dataloader_num_workers=0,
        **flags,
    )


def finetune_seed(model: str, tokenizer: Any, data: TaskData, seed: int, settings: FinetuneSettings, work: Path,
                  *, resume: bool = False, label: str | None = None, revision: str | None = None) -> dict[str, float]:
    """Fine-tune ``model`` on ``data`` with ``seed`` and return its dev metrics in percent.

    Parameters
    ----------
    model
        A model folder (a run's checkpoint) or a hub id.
    tokenizer
        Its tokenizer.
    data, seed, settings
        The task, the seed (head initialisation, data order, dropout) and the settings.
    work
        Folder of the Trainer checkpoints of this seed; removed once the seed is done.
    resume
        Continue from the newest Trainer checkpoint in ``work`` if there is one.
    label
        The source as the user named it (messages).

    Returns
    -------
    dict
        ``{metric: value}`` for every metric of every dev split (:meth:`TaskData.metric_names`).
    """
    import numpy as np
    import transformers
    from transformers import DataCollatorWithPadding, Trainer
    from transformers.trainer_callback import PrinterCallback, ProgressCallback
    from transformers.trainer_utils import get_last_checkpoint

    from posviz.finetuning.metrics import compute_metrics
    from posviz.util.compat import trainer_resume_context, trainer_tokenizer_kwargs

    quiet_transformers()
    args = training_arguments(settings, work, seed, len(data.train))
    transformers.set_seed(seed)
    net = load_classifier(model, data.num_labels, label or model, revision)
    length = min(settings.max_length, getattr(net.config, "max_position_embeddings", settings.max_length) or settings.max_length)
    train_set = encode(tokenizer, data, data.train, length)
    trainer = Trainer(model=net, args=args, train_dataset=train_set, data_collator=DataCollatorWithPadding(tokenizer),
                      **trainer_tokenizer_kwargs(tokenizer))
    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    last = get_last_checkpoint(str(work)) if resume and work.is_dir() else None
    if not resume and work.is_dir() and args.process_index == 0:
        shutil.rmtree(work, ignore_errors=True)  # a previous interrupted attempt: start this seed afresh
    with trainer_resume_context():
        trainer.train(resume_from_checkpoint=last)
    metrics: dict[str, float] = {}
    for split, examples in data.dev.items():
        out = trainer.predict(encode(tokenizer, data, examples, length))
        logits = np.asarray(out.predictions)
        predictions = logits.reshape(-1) if data.num_labels == 1 else logits.argmax(-1)
        targets = np.asarray([data.label_id(e.label) for e in examples])
        for name, value in compute_metrics(data.metrics, predictions, targets).items():
            metrics[name + (f"_{split}" if split else "")] = value
    return metrics
