"""``posviz train``: masked-LM training of posviz models with Toeplitzness tracking.

The pieces are transformers' own: :class:`~transformers.Trainer` (so ``torchrun``
/ ``accelerate launch`` and mixed precision work unchanged) and
:class:`~transformers.DataCollatorForLanguageModeling` (15% masking, 80/10/10).
posviz adds

* the data: corpus → tokenizer → fixed-length blocks starting with ``[CLS]``;
  a held-out split chosen with a fixed seed and masked once, so every evaluation
  of every run scores the same tokens;
* :class:`ToeplitznessCallback`: at each evaluation, the Toeplitzness of E_P
  (where the scheme has a table) and of every head's positional scores, merged
  into the Trainer's log entry and written to ``trajectory.csv``/``.json``;
* :class:`ManifestCallback`: a checksummed manifest after each checkpoint, so
  ``--resume`` skips checkpoints a crash left incomplete (:mod:`posviz.train.manifests`);
* a progress bar and a summary.

Run folder layout::

    RUN/run.json                  options of the run (``--resume`` reuses them)
    RUN/tokenizer/                the tokenizer (trained or copied)
    RUN/checkpoint-N/             model (safetensors + config), optimizer, RNG states
    RUN/trajectory.csv, .json     metrics and Toeplitzness per evaluation
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import math
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posviz.errors import OptionError, PosvizError
from posviz.train.log import RUN_FILE, evaluation_records, write_logs

#: Default peak learning rates per size (linear warm-up over 10% of the steps, then linear decay).
LEARNING_RATES = {"tiny": 1e-3, "small": 5e-4, "base": 1e-4}
MLM_PROBABILITY = 0.15
SPLIT_SEED = 0  # held-out split and its masking do not depend on --seed: runs share one eval set
EVAL_MASK_SEED = 1234
PRECISIONS = ("auto", "fp32", "bf16", "fp16")

# Options that define a run; --resume refuses to change them.
_FIXED = ("scheme", "corpus", "tokenizer", "size", "seq_len", "seed", "batch_size", "learning_rate", "vocab_size", "tisa_kernels", "shared_layers")


@dataclass
class TrainOptions:
    """Everything ``posviz train`` needs; field names match the CLI options.

    Attributes
    ----------
    scheme
        Positional scheme (see :data:`posviz.models.SCHEMES`).
    corpus
        Corpus specs (see :mod:`posviz.train.data`).
    out
        Run folder.
    tokenizer
        Existing tokenizer (folder or hub id); ``None`` trains a WordPiece tokenizer on the corpus.
    size
        ``tiny``, ``small`` or ``base``.
    steps, seq_len, seed, batch_size
        Optimizer steps, block length (also ``max_position_embeddings``), seed, per-device batch.
    learning_rate
        Peak learning rate (default by size, :data:`LEARNING_RATES`).
    eval_every, save_every
        Evaluation and checkpoint intervals in steps (``save_every`` defaults to ``eval_every``).
    keep
        Checkpoints kept (at least 2, so a corrupt last one has a predecessor).
    vocab_size
        Size of the trained tokenizer's vocabulary.
    precision
        ``auto`` (bf16 or fp16 autocast on CUDA, fp32 on CPU), ``fp32``, ``bf16`` or ``fp16``.
    tisa_kernels, shared_layers
        TISA kernels per head; ALBERT-style cross-layer sharing (one layer group).
    max_eval_blocks
        At most this many held-out blocks (5% of the corpus otherwise).
    """

    scheme: str
    corpus: list[str]
    out: Path
    tokenizer: str | None = None
    size: str = "tiny"
    steps: int = 500
    seq_len: int = 128
    seed: int = 0
    batch_size: int = 16
    learning_rate: float | None = None
    eval_every: int = 50
    save_every: int | None = None
    keep: int = 2
    vocab_size: int = 8000
    precision: str = "auto"
    tisa_kernels: int = 5
    shared_layers: bool = True
    max_eval_blocks: int = 256

    def __post_init__(self) -> None:
        from posviz.models.configuration_posviz import SCHEMES, SIZES

        self.out = Path(self.out)
        self.corpus = list(self.corpus)
        if self.learning_rate is None:
            self.learning_rate = LEARNING_RATES.get(self.size, 1e-4)
        if self.save_every is None:
            self.save_every = self.eval_every
        checks = [
            (self.scheme in SCHEMES, f"unknown scheme {self.scheme!r}", f"choose one of {', '.join(SCHEMES)}"),
            (self.size in SIZES, f"unknown size {self.size!r}", f"choose one of {', '.join(SIZES)}"),
            (self.precision in PRECISIONS, f"unknown precision {self.precision!r}", f"choose one of {', '.join(PRECISIONS)}"),
            (self.steps >= 1, "--steps must be at least 1", None),
            (8 <= self.seq_len <= 8192, "--seq-len must be between 8 and 8192", None),
            (self.batch_size >= 1, "--batch-size must be at least 1", None),
            (self.eval_every >= 1 and self.save_every >= 1, "--eval-every and --save-every must be at least 1", None),
            (self.keep >= 2, "--keep must be at least 2", "the previous checkpoint is the fallback when the last one is corrupt"),
            (self.vocab_size >= 100, "--vocab-size must be at least 100", None),
            (self.tisa_kernels >= 1, "--kernels must be at least 1", None),
            (self.learning_rate > 0, "--lr must be positive", None),
        ]
        for ok, message, hint in checks:
            if not ok:
                raise OptionError(message, hint)

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON dict of the options (``run.json``)."""
        d = dataclasses.asdict(self)
        d["out"] = str(self.out)
        return d


@dataclass
class TrainResult:
    """What a finished run reports: paths, timing and the evaluation records."""

    options: TrainOptions
    checkpoint: Path
    records: list[dict[str, Any]]
    seconds: float
    steps_run: int
    parameters: int
    train_blocks: int
    eval_blocks: int
    resumed_from: Path | None = None
    device: str = "cpu"
    extra: dict[str, Any] = field(default_factory=dict)


class _Blocks:
    """A map-style dataset of token blocks: fixed labels (held-out set) or the block index (training)."""

    def __init__(self, input_ids, labels=None) -> None:
        self.input_ids = input_ids
        self.labels = labels

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def __getitem__(self, i: int) -> dict[str, Any]:
        if self.labels is not None:
            return {"input_ids": self.input_ids[i], "labels": self.labels[i]}
        return {"input_ids": self.input_ids[i], "index": i}


def batch_seed(seed: int, indices: list[int]) -> int:
    """A 63-bit seed for masking one batch, from the run seed and the batch's block indices."""
    import numpy as np

    digest = hashlib.blake2b(np.asarray([seed, *indices], dtype=np.int64).tobytes(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


class MlmCollator:
    """Masks training batches with ``DataCollatorForLanguageModeling``; held-out batches pass through.

    Each training batch is masked under its own seed, derived from the run seed
    and the batch's block indices (:func:`batch_seed`), inside
    ``torch.random.fork_rng`` so the global RNG is never touched. Masking is
    therefore dynamic (blocks are reshuffled every epoch) yet reproducible after
    ``--resume``, whatever order Trainer restores RNG states and prefetches
    batches in.
    """

    def __init__(self, tokenizer: Any, seed: int = 0, mlm_probability: float = MLM_PROBABILITY) -> None:
        from transformers import DataCollatorForLanguageModeling

        self.mlm = DataCollatorForLanguageModeling(tokenizer, mlm_probability=mlm_probability)
        self.seed = seed

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        import torch

        if "labels" in examples[0]:
            return {k: torch.stack([e[k] for e in examples]) for k in ("input_ids", "labels")}
        indices = [int(e["index"]) for e in examples]
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(batch_seed(self.seed, indices))
            return self.mlm([{"input_ids": e["input_ids"]} for e in examples])


def mask_once(tokenizer: Any, blocks, seed: int = EVAL_MASK_SEED) -> _Blocks:
    """Mask blocks once under a fixed seed (the held-out set; the global RNG is left untouched)."""
    import torch

    ids = torch.as_tensor(blocks)
    batch = MlmCollator(tokenizer, seed)([{"input_ids": b, "index": i} for i, b in enumerate(ids)])
    return _Blocks(batch["input_ids"], batch["labels"])


def masked_accuracy(eval_pred) -> dict[str, float]:
    """Share of masked tokens predicted exactly (``compute_metrics`` for Trainer)."""

    preds, labels = eval_pred.predictions, eval_pred.label_ids
    keep = labels != -100
    return {"accuracy": float((preds[keep] == labels[keep]).mean()) if keep.any() else float("nan")}


def argmax_logits(logits, labels):
    """Keep only predicted ids during evaluation (never the full vocabulary logits)."""
    return logits.argmax(dim=-1)


def measure_positions(model, n: int | None = None) -> dict[str, Any]:
    """Toeplitzness of a live model's E_P (with null baseline) and of each layer-0 head.

    Returns the fields the training log records (see :mod:`posviz.train.log`).
    """
    import warnings

    from posviz.models.position_terms import position_table, positional_scores
    from posviz.positional_scores import PosvizWarning
    from posviz.toeplitz.engine import score, score_embeddings

    out: dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PosvizWarning)  # zero variance at init is reported as NaN → null
        table = position_table(model)
        if table is not None:
            s = score_embeddings(table[:n] if n else table, null_draws=5, seed=0)
            out.update(toeplitzness_ep=s.toeplitzness, toeplitzness_ep_offdiag=s.toeplitzness_offdiag, null_ep=s.null_mean, excess_ep=s.excess)
        if model.config.position_scheme != "none":
            t = score(positional_scores(model, layer=0, n=n), null=False).toeplitzness
            out["toeplitzness_heads"] = [float(x) for x in t]
            out["toeplitzness_heads_mean"] = float(t.mean())
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in out.items()}


def _trainer_callback_base():
    from transformers import TrainerCallback

    return TrainerCallback


def make_callbacks(run_dir: Path, run_info: dict[str, Any], on_update: Callable[[str, Any], None] | None = None) -> list:
    """The posviz callbacks: Toeplitzness logging, checkpoint manifests, progress."""
    base = _trainer_callback_base()

    class ToeplitznessCallback(base):
        """Adds Toeplitzness to each evaluation's log entry and rewrites the run's logs."""

        def on_evaluate(self, args, state, control, metrics=None, model=None, **kwargs):
            if model is None:
                return
            fields = measure_positions(model, n=model.config.max_position_embeddings)
            for entry in reversed(state.log_history):  # the entry Trainer.log just appended
                if "eval_loss" in entry and entry.get("step") == state.global_step:
                    entry.update(fields)
                    break
            if state.is_world_process_zero:
                write_logs(run_dir, evaluation_records(state.log_history), run_info)
            if on_update:
                on_update("evaluate", evaluation_records(state.log_history)[-1])

    class ManifestCallback(base):
        """Marks a checkpoint complete once Trainer has written all of it."""

        def on_save(self, args, state, control, **kwargs):
            from posviz.train.manifests import write_manifest

            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if state.is_world_process_zero and folder.is_dir():
                write_manifest(folder)

    class ProgressCallback(base):
        """Forwards steps and training losses to the progress display."""

        def on_step_end(self, args, state, control, **kwargs):
            if on_update:
                on_update("step", state.global_step)

        def on_log(self, args, state, control, logs=None, **kwargs):
            if on_update and logs and "loss" in logs:
                on_update("loss", logs["loss"])

    return [ToeplitznessCallback(), ManifestCallback(), ProgressCallback()]


def _fingerprint(blocks) -> str:
    return hashlib.sha256(blocks.tobytes()).hexdigest()[:16]


def _precision_flags(precision: str) -> tuple[dict[str, Any], str]:
    import torch

    cuda = torch.cuda.is_available()
    if precision == "auto":
        precision = ("bf16" if torch.cuda.is_bf16_supported() else "fp16") if cuda else "fp32"
    if precision == "fp16" and not cuda:
        raise OptionError("--precision fp16 needs a CUDA GPU", "use bf16 or fp32 on CPU")
    flags = {"bf16": precision == "bf16", "fp16": precision == "fp16", "use_cpu": not cuda}
    return flags, f"{'cuda' if cuda else 'cpu'} {precision}"


def prepare_run(options: TrainOptions, resume: bool) -> tuple[TrainOptions, Path | None]:
    """Check the run folder and, for ``--resume``, the recorded options and the checkpoint.

    Returns the options to use and the checkpoint to resume from (``None``: from scratch).
    """
    from posviz.train.manifests import checkpoints, resume_checkpoint

    out = options.out
    run_file = out / RUN_FILE
    if not resume:
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise OptionError(f"{out} already exists and is not empty", "pass --resume to continue that run, or choose another --out")
        return options, None
    if not run_file.is_file():
        raise OptionError(f"no run to resume in {out} (no {RUN_FILE})", "start it without --resume first")
    try:
        recorded = json.loads(run_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise PosvizError(f"cannot read {run_file}: {e}") from None
    for key in _FIXED:
        if key in recorded and recorded[key] != getattr(options, key) and getattr(options, key) is not None:
            raise OptionError(
                f"--resume cannot change {key.replace('_', '-')}: the run used {recorded[key]!r}, not {getattr(options, key)!r}",
                "drop the option, or start a new run with another --out",
            )
    had_checkpoints = bool(checkpoints(out))
    ckpt = resume_checkpoint(out)
    if ckpt is None and had_checkpoints:
        import warnings

        warnings.warn("no complete checkpoint is left; training starts again from step 0", stacklevel=2)
    return options, ckpt


def train(options: TrainOptions, *, resume: bool = False, on_update: Callable[[str, Any], None] | None = None) -> TrainResult:
    """Train a posviz model on a corpus and record its Toeplitzness trajectory.

    Parameters
    ----------
    options
        What to train (see :class:`TrainOptions`).
    resume
        Continue the run in ``options.out`` from its newest complete checkpoint
        (same weights, optimizer, scheduler and RNG states as an uninterrupted run).
    on_update
        Called with ``("setup", dict)``, ``("step", int)``, ``("loss", float)`` and
        ``("evaluate", record)`` for progress displays.

    Returns
    -------
    TrainResult
        Final checkpoint, evaluation records and timing.
    """
    import numpy as np
    import torch
    import transformers
    from transformers import Trainer, TrainingArguments

    import posviz.models  # noqa: F401  (registers the Auto classes)
    from posviz.models import SIZES, PosvizAlbertConfig, PosvizForMaskedLM
    from posviz.train.data import load_corpus, load_tokenizer, make_blocks, train_tokenizer
    from posviz.train.manifests import checkpoint_step
    from posviz.util.atomic import write_text_atomic

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    options, checkpoint = prepare_run(options, resume)
    out = options.out
    flags, device = _precision_flags(options.precision)
    args = TrainingArguments(
        output_dir=str(out),
        max_steps=options.steps,
        per_device_train_batch_size=options.batch_size,
        per_device_eval_batch_size=options.batch_size,
        learning_rate=options.learning_rate,
        warmup_steps=max(1, options.steps // 10),
        lr_scheduler_type="linear",
        weight_decay=0.01,
        adam_beta1=0.9,
        adam_beta2=0.999,
        adam_epsilon=1e-6,
        max_grad_norm=1.0,
        eval_strategy="steps",
        eval_steps=options.eval_every,
        eval_on_start=checkpoint is None,
        save_strategy="steps",
        save_steps=options.save_every,
        save_total_limit=options.keep,
        logging_steps=max(1, min(options.eval_every, 10)),
        seed=options.seed,
        data_seed=options.seed,
        report_to=[],
        disable_tqdm=True,
        dataloader_num_workers=0,
        remove_unused_columns=False,  # keep the block index the collator seeds masking with
        **flags,
    )
    main = args.process_index == 0

    # -- data and tokenizer (the main process first; the others reuse its tokenizer) --
    tok_dir = out / "tokenizer"
    with args.main_process_first(local=False, desc="tokenizer"):
        texts = load_corpus(options.corpus)
        if tok_dir.is_dir():
            tokenizer = load_tokenizer(str(tok_dir))
        elif options.tokenizer:
            tokenizer = load_tokenizer(options.tokenizer)
        else:
            tokenizer = train_tokenizer(texts, options.vocab_size, options.seq_len)
        blocks = make_blocks(tokenizer, texts, options.seq_len)
        if len(blocks) < 4:
            raise PosvizError(
                f"the corpus is too small: {len(blocks)} block(s) of {options.seq_len} tokens",
                "add text or lower --seq-len",
            )
    order = np.random.default_rng(SPLIT_SEED).permutation(len(blocks))
    n_eval = min(options.max_eval_blocks, max(1, len(blocks) // 20))
    eval_set = mask_once(tokenizer, blocks[np.sort(order[:n_eval])])
    train_set = _Blocks(torch.as_tensor(blocks[np.sort(order[n_eval:])]))
    run_info = {**options.to_json(), "data_fingerprint": _fingerprint(blocks), "train_blocks": len(train_set), "eval_blocks": n_eval}
    if resume:
        recorded = json.loads((out / RUN_FILE).read_text(encoding="utf-8"))
        if recorded.get("data_fingerprint") not in (None, run_info["data_fingerprint"]):
            raise PosvizError("the corpus or tokenizer changed since the run started", "resume with the same --corpus, or start a new run")
    # Nothing is written before all checks passed; run.json first, so a run killed
    # from here on can always be resumed (a missing tokenizer is rebuilt identically).
    if main:
        out.mkdir(parents=True, exist_ok=True)
        write_text_atomic(out / RUN_FILE, json.dumps(run_info, indent=2) + "\n")
        if not tok_dir.is_dir():
            tmp = out / ".tokenizer.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            tokenizer.save_pretrained(str(tmp))
            os.replace(tmp, tok_dir)

    # -- model --
    config = PosvizAlbertConfig(
        vocab_size=len(tokenizer),
        max_position_embeddings=options.seq_len,
        position_scheme=options.scheme,
        tisa_kernels=options.tisa_kernels,
        num_hidden_groups=1 if options.shared_layers else SIZES[options.size]["num_hidden_layers"],
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.cls_token_id,
        eos_token_id=tokenizer.sep_token_id,
        **SIZES[options.size],
    )
    transformers.set_seed(options.seed)
    model = PosvizForMaskedLM(config)
    parameters = sum(p.numel() for p in model.parameters())
    if on_update:
        on_update("setup", {"parameters": parameters, "train_blocks": len(train_set), "eval_blocks": n_eval,
                            "device": device, "resumed_from": checkpoint, "steps": options.steps,
                            "start": checkpoint_step(checkpoint) if checkpoint else 0})

    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=train_set,
        eval_dataset=eval_set,
        data_collator=MlmCollator(tokenizer, options.seed),
        processing_class=tokenizer,
        compute_metrics=masked_accuracy,
        preprocess_logits_for_metrics=argmax_logits,
        callbacks=make_callbacks(out, run_info, on_update),
    )
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    start = time.perf_counter()
    start_step = checkpoint_step(checkpoint) if checkpoint else 0
    try:
        trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    except OSError as e:
        if e.errno not in _WRITE_ERRNOS:
            raise
        raise PosvizError(_write_failure(out, e, trainer.state.global_step)) from None
    seconds = time.perf_counter() - start
    final = out / f"checkpoint-{trainer.state.global_step}"
    records = evaluation_records(trainer.state.log_history)
    return TrainResult(
        options=options,
        checkpoint=final,
        records=records,
        seconds=seconds,
        steps_run=trainer.state.global_step - start_step,
        parameters=parameters,
        train_blocks=len(train_set),
        eval_blocks=n_eval,
        resumed_from=checkpoint,
        device=device,
    )


#: File-system errors (disk full, quota, read-only, I/O) end a run with one line, not a traceback.
_WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EACCES}


def _write_failure(out: Path, err: OSError, step: int) -> str:
    """One sentence for a run stopped by a failed write: what happened and where to resume from."""
    from posviz.train.manifests import checkpoint_problem, checkpoints

    intact = next((c for c in checkpoints(out) if checkpoint_problem(c) is None), None)
    where = f"the last complete checkpoint is {intact.name}" if intact else "no checkpoint was completed"
    return (f"cannot write to {out}: {err.strerror} (training stopped near step {step}; {where}; "
            f"free space, then `posviz train --resume --out {out}` continues from it)")


def default_out(scheme: str, size: str, seed: int) -> Path:
    """``runs/SCHEME-SIZE-sSEED`` (``+`` replaced so the name is shell-friendly)."""
    return Path("runs") / f"{scheme.replace('+', '-')}-{size}-s{seed}"


def recorded_options(out: Path) -> dict[str, Any]:
    """Options stored in ``out/run.json`` (empty if there is none)."""
    try:
        data = json.loads((Path(out) / RUN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    names = {f.name for f in dataclasses.fields(TrainOptions)}
    return {k: v for k, v in data.items() if k in names}


def summary_lines(result: TrainResult) -> list[str]:
    """The final summary, one line per fact."""
    o = result.options
    r = result.records
    first, last = (r[0], r[-1]) if r else ({}, {})

    def arrow(key: str, fmt: str = "{:.3f}") -> str:
        a, b = first.get(key), last.get(key)
        if a is None or b is None:
            return "—"
        return f"{fmt.format(a)} → {fmt.format(b)}"

    per_step = result.seconds / max(result.steps_run, 1)
    lines = [
        f"run         {o.out}  (scheme {o.scheme}, size {o.size}, {result.parameters / 1e6:.2f}M parameters, seq {o.seq_len}, seed {o.seed}, {result.device})",
        f"training    {result.steps_run} steps in {result.seconds:.1f} s ({per_step:.3f} s/step)"
        + (f", resumed from {result.resumed_from.name}" if result.resumed_from else "")
        + f"; {result.train_blocks} training blocks, {result.eval_blocks} held-out",
        f"eval        loss {arrow('eval_loss', '{:.3f}')}, masked-token accuracy {arrow('eval_accuracy')}"
        + (f"  (steps {first.get('step')} → {last.get('step')})" if r else ""),
    ]
    if last.get("toeplitzness_ep") is not None:
        lines.append(
            f"E_P         Toeplitzness {arrow('toeplitzness_ep')} (null {last.get('null_ep', float('nan')):.3f}, excess {arrow('excess_ep')})"
        )
    if last.get("toeplitzness_heads_mean") is not None:
        lines.append(f"heads       layer-0 positional scores, mean Toeplitzness {arrow('toeplitzness_heads_mean')}")
    lines += [
        f"checkpoint  {result.checkpoint}",
        f"log         {o.out / 'trajectory.csv'}, {o.out / 'trajectory.json'}",
    ]
    return lines

