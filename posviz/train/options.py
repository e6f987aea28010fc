"""What a ``posviz train`` run is: its options, and what they become for transformers.

:class:`TrainOptions` holds and checks the options (field names match the CLI);
:func:`training_arguments` and :func:`model_config` turn them into the
``TrainingArguments`` and the model configuration of a run, with the learning
rate by size (:data:`LEARNING_RATES`) and the precision flags of the device
(:func:`precision_flags`). See ARCHITECTURE.md.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from posviz.errors import OptionError

#: Default peak learning rates per size (linear warm-up over 10% of the steps, then linear decay); a shape such as
#: ``2x64`` takes that of the first named size at least as wide (:func:`default_learning_rate`).
LEARNING_RATES = {"tiny": 1e-3, "small": 5e-4, "base": 1e-4}


def default_learning_rate(size: str) -> float:
    """The default peak learning rate of ``size``: a named size's own, or, for a shape, that of the first named
    size at least as wide (``2x64`` takes tiny's 1e-3, ``8x512`` base's 1e-4).

    Parameters
    ----------
    size
        A named size or a shape (:func:`posviz.models.configuration_posviz.size_dimensions`).
    """
    from posviz.models.configuration_posviz import SIZES, size_dimensions

    if size in LEARNING_RATES:
        return LEARNING_RATES[size]
    width = size_dimensions(size)["hidden_size"]
    return next((LEARNING_RATES[name] for name in LEARNING_RATES if SIZES[name]["hidden_size"] >= width), LEARNING_RATES["base"])
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
#: Training objectives: masked LM (bidirectional, the default) or causal LM (next token, causal mask).
OBJECTIVES = ("mlm", "causal")

#: Options that define a run; ``--resume`` refuses to change them.
FIXED_OPTIONS = (
    "scheme", "corpus", "tokenizer", "size", "seq_len", "seed", "batch_size", "learning_rate", "vocab_size",
    "tisa_kernels", "shared_layers", "dropout", "train_fraction", "objective", "rope_base", "rotary_fraction",
    "task", "train_length", "test_length", "task_examples",
)
#: Options of a task run (``--task``), absent from the ``run.json`` of a run trained on text.
TASK_OPTIONS = ("task", "train_length", "test_length", "task_examples")


@dataclass
class TrainOptions:
    """Everything ``posviz train`` needs; field names match the CLI options.

    Attributes
    ----------
    scheme
        Positional scheme (see :data:`posviz.models.SCHEMES`), or one installed under the ``posviz.schemes``
        entry-point group (:mod:`posviz.schemes.modules.plugins`).
    corpus
        Corpus specs (see :mod:`posviz.train.corpus`).
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
    dropout
        Hidden and attention dropout (ALBERT's ``hidden_dropout_prob`` and
        ``attention_probs_dropout_prob``); 0 as ALBERT v2, 0.1 as ALBERT v1 and BERT.
    train_fraction
        Train on this share of the training blocks (a fixed random subset, the same
        for every ``--seed``; smaller fractions are subsets of larger ones). The
        tokenizer and the held-out set still come from the whole corpus, so runs
        with different fractions are evaluated on the same held-out blocks.
    objective
        ``mlm`` (masked LM, bidirectional attention: the default) or ``causal``
        (next-token LM under a causal mask; :class:`~posviz.models.PosvizForCausalLM`).
    rope_base, rotary_fraction
        RoPE's base (``rope_theta``) and the share of each head's dimensions that
        rotate (``partial_rotary_factor``); used by ``scheme="rope"`` only.
    task
        An algorithmic task (:data:`posviz.tasks.TASKS`) instead of a corpus: a causal LM
        whose loss is on the answer (:mod:`posviz.train.task_data`). ``corpus`` is then
        empty, ``objective`` causal, and ``seq_len`` the positions ``test_length`` needs.
    train_length, test_length
        The task's longest length trained on (every length up to it) and the longest the
        model's positions cover (defaults: the task's, Kazemnejad et al.'s splits).
    task_examples
        Training examples per length.
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
    dropout: float = 0.0
    train_fraction: float = 1.0
    objective: str = "mlm"
    rope_base: float = 10000.0
    rotary_fraction: float = 1.0
    task: str | None = None
    train_length: int | None = None
    test_length: int | None = None
    task_examples: int = 1000

    def __post_init__(self) -> None:
        from posviz.models.configuration_posviz import size_dimensions
        from posviz.schemes.modules.plugins import BUILT_IN, known_schemes, load_plugin

        self.out = Path(self.out)
        self.corpus = list(self.corpus)
        if self.task is not None:
            self._task_defaults()
        try:
            dims = size_dimensions(self.size)
        except ValueError as e:
            raise OptionError(str(e), "tiny is 4x128, small 6x256x4: LAYERSxWIDTH[xHEADS]") from None
        if self.learning_rate is None:
            self.learning_rate = default_learning_rate(self.size)
        if self.save_every is None:
            self.save_every = self.eval_every
        checks = [
            (self.scheme in known_schemes(), f"unknown scheme {self.scheme!r}", f"choose one of {', '.join(known_schemes())}"),
            (self.precision in PRECISIONS, f"unknown precision {self.precision!r}", f"choose one of {', '.join(PRECISIONS)}"),
            (self.steps >= 1, "--steps must be at least 1", None),
            (8 <= self.seq_len <= 8192, "--seq-len must be between 8 and 8192", None),
            (self.batch_size >= 1, "--batch-size must be at least 1", None),
            (self.eval_every >= 1 and self.save_every >= 1, "--eval-every and --save-every must be at least 1", None),
            (self.keep >= 2, "--keep must be at least 2", "the previous checkpoint is the fallback when the last one is corrupt"),
            (self.vocab_size >= 100, "--vocab-size must be at least 100", None),
            (self.tisa_kernels >= 1, "--kernels must be at least 1", None),
            (self.learning_rate > 0, "--lr must be positive", None),
            (0 <= self.dropout < 1, f"--dropout must be at least 0 and below 1, not {self.dropout}", None),
            (0 < self.train_fraction <= 1, f"--train-fraction must be above 0 and at most 1, not {self.train_fraction}", None),
            (self.objective in OBJECTIVES, f"unknown objective {self.objective!r}", f"choose one of {', '.join(OBJECTIVES)}"),
            (self.rope_base > 1, f"--rope-base must be above 1, not {self.rope_base:g}", None),
            (0 < self.rotary_fraction <= 1, f"--rotary-fraction must be above 0 and at most 1, not {self.rotary_fraction:g}", None),
        ]
        for ok, message, hint in checks:
            if not ok:
                raise OptionError(message, hint)
        if self.scheme not in BUILT_IN:  # another package's scheme: it must import before anything is written
            load_plugin(self.scheme)
        head_dim = dims["hidden_size"] // dims["num_attention_heads"]
        rotated = int(head_dim * self.rotary_fraction)
        if self.scheme == "rope" and (rotated < 2 or rotated % 2):
            raise OptionError(f"--rotary-fraction {self.rotary_fraction:g} rotates {rotated} of the {head_dim} dimensions of a "
                              f"{self.size} head; RoPE rotates pairs, so it must be an even number (at least 2)",
                              f"for example --rotary-fraction {max(2, rotated - rotated % 2) / head_dim:g}")

    def _task_defaults(self) -> None:
        """A task run: its lengths (the task's defaults), the causal objective, the positions the test length needs."""
        from posviz.tasks import get_task, task_positions

        spec = get_task(self.task)
        self.train_length = spec.train_length if self.train_length is None else self.train_length
        self.test_length = max(spec.test_length, self.train_length) if self.test_length is None else self.test_length
        if self.corpus:
            raise OptionError("a --task run reads no corpus", "drop --corpus, or drop --task")
        if self.train_length < spec.min_length:
            raise OptionError(f"--train-length {self.train_length}: task {self.task} starts at {spec.min_length} {spec.what}")
        if self.test_length < self.train_length:
            raise OptionError(f"--test-length {self.test_length} is below --train-length {self.train_length}",
                              "the model's positions must cover the trained lengths; test lengths beyond them measure length generalisation")
        if self.task_examples < 1:
            raise OptionError(f"--examples {self.task_examples}: need at least 1 per length")
        self.objective = "causal"
        self.seq_len = task_positions(self.task, self.test_length)

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON dict of the options (``run.json``); the task options only for a task run."""
        d = dataclasses.asdict(self)
        d["out"] = str(self.out)
        if self.task is None:
            for key in TASK_OPTIONS:
                d.pop(key)
        return d


def precision_flags(precision: str) -> tuple[dict[str, Any], str]:
    """``TrainingArguments`` flags for ``--precision``, and the device in words (``"cuda bf16"``).

    Raises
    ------
    OptionError
        ``fp16`` without a CUDA GPU.
    """
    import torch

    cuda = torch.cuda.is_available()
    if precision == "auto":
        precision = ("bf16" if torch.cuda.is_bf16_supported() else "fp16") if cuda else "fp32"
    if precision == "fp16" and not cuda:
        raise OptionError("--precision fp16 needs a CUDA GPU", "use bf16 or fp32 on CPU")
    flags = {"bf16": precision == "bf16", "fp16": precision == "fp16", "use_cpu": not cuda}
    return flags, f"{'cuda' if cuda else 'cpu'} {precision}"


def training_arguments(options: TrainOptions, flags: dict[str, Any]):
    """The run's ``TrainingArguments``: AdamW with linear warm-up and decay, evaluation and checkpoints every N steps.

    Under ``torchrun`` their first use starts the process group (gloo on CPU,
    NCCL on GPUs; see :mod:`posviz.train.processes`). ``eval_on_start`` is left off: the loop sets it once it knows the
    run starts from scratch (a resumed run has that evaluation in its log already).

    Parameters
    ----------
    options
        The run's options; ``batch_size`` is per process (the global batch is
        ``batch_size`` × the number of processes).
    flags
        Precision flags (:func:`precision_flags`).
    """
    from transformers import TrainingArguments

    from posviz.util.compat import pin_mixed_precision

    pin_mixed_precision(flags["bf16"], flags["fp16"])
    return TrainingArguments(
        output_dir=str(options.out),
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
        ddp_find_unused_parameters=False,  # every parameter of every scheme gets a gradient (tested)
        **flags,
    )


def model_config(options: TrainOptions, tokenizer: Any):
    """The model configuration of a run: its size, scheme, objective and block length, the tokenizer's special ids."""
    from posviz.models import PosvizAlbertConfig, size_dimensions

    dims = size_dimensions(options.size)
    return PosvizAlbertConfig(
        vocab_size=len(tokenizer),
        max_position_embeddings=options.seq_len,
        position_scheme=options.scheme,
        rope_theta=options.rope_base,
        partial_rotary_factor=options.rotary_fraction,
        is_causal=options.objective == "causal",
        tisa_kernels=options.tisa_kernels,
        num_hidden_groups=1 if options.shared_layers else dims["num_hidden_layers"],
        hidden_dropout_prob=options.dropout,
        attention_probs_dropout_prob=options.dropout,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.cls_token_id,
        eos_token_id=tokenizer.eos_token_id if options.task else tokenizer.sep_token_id,  # a task's answer ends in [EOS]
        **dims,
    )
