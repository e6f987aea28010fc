"""``posviz train``: train a small model with a chosen positional scheme and track its Toeplitzness."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from posviz.cli.messages import report_error
from posviz.cli.options import Precision


class Objective(str, Enum):
    mlm = "mlm"
    causal = "causal"


class _Display:
    """Rich progress bar on stderr, fed by the training callbacks."""

    def __init__(self) -> None:
        from posviz.util.progress import count_bar

        self.progress = count_bar(status=True, transient=False)
        self.task = None
        self.loss: float | None = None
        self.eval = ""

    def __call__(self, event: str, value: Any) -> None:
        if event == "setup":
            self.progress.start()
            self.task = self.progress.add_task("training", total=value["steps"], completed=value["start"], status="")
            return
        if self.task is None:
            return
        if event == "step":
            self.progress.update(self.task, completed=value)
        elif event == "loss":
            self.loss = float(value)
        elif event == "evaluate":
            t = next((value[k] for k in ("toeplitzness_ep_offdiag", "toeplitzness_heads_offdiag_mean") if value.get(k) is not None), None)
            acc, exact = value.get("eval_accuracy"), value.get("eval_exact_match")
            self.eval = f" · eval acc {acc:.3f}" if acc is not None else ""
            self.eval += f" · exact match {exact:.3f}" if exact is not None else ""
            self.eval += f" · T offdiag {t:.3f}" if t is not None else ""
        loss = f"loss {self.loss:.3f}" if self.loss is not None else ""
        self.progress.update(self.task, status=loss + self.eval)

    def stop(self) -> None:
        self.progress.stop()


def command(
    scheme: Annotated[str | None, typer.Option("--scheme", help="Positional scheme: absolute, none, tisa, absolute+tisa (TISA beside E_P), tupe-a, tupe-r (TUPE with T5 buckets), t5, alibi, rope (rotary q/k), sinusoidal (the fixed table of Vaswani et al.), or one that another package registers under the posviz.schemes entry-point group (docs/extending.md).", show_default=False)] = None,
    objective: Annotated[Objective | None, typer.Option("--objective", help="mlm: masked LM, bidirectional attention; causal: next-token LM under a causal mask (none = NoPE, alibi = Press et al.'s causal ALiBi). (default: mlm)", show_default=False)] = None,
    rope_base: Annotated[float | None, typer.Option("--rope-base", help="RoPE base (rope_theta), above 1; --scheme rope only. (default: 10000)", show_default=False)] = None,
    rotary_fraction: Annotated[float | None, typer.Option("--rotary-fraction", help="Share of each head's dimensions RoPE rotates, 0 < F <= 1, an even number of them (GPT-NeoX's rotary_pct); --scheme rope only. (default: 1)", show_default=False)] = None,
    corpus: Annotated[list[str] | None, typer.Option("--corpus", help="Text file, folder of .txt/.md/.rst files, a packaged corpus (cpython-3.11.7-docstrings[:N], the default: the same bytes everywhere), stdlib-docstrings[:N] (the running Python's: machine-dependent) or a HF dataset id; repeatable.", show_default=False)] = None,
    tokenizer: Annotated[str | None, typer.Option("--tokenizer", help="Existing tokenizer (folder or hub id); default: train a WordPiece tokenizer on the corpus.", show_default=False)] = None,
    size: Annotated[str | None, typer.Option("--size", help="tiny (4×128, 4 heads), small (6×256, 4 heads), base (ALBERT base: 12×768, 12 heads), or a shape LAYERSxWIDTH[xHEADS] such as 2x64 (heads of 32 unless given, feed-forward 4× the width, embeddings half of it). (default: tiny)", show_default=False)] = None,
    steps: Annotated[int | None, typer.Option("--steps", min=1, help="Optimizer steps. (default: 500)", show_default=False)] = None,
    seq_len: Annotated[int | None, typer.Option("--seq-len", min=8, max=8192, help="Tokens per block, = max positions. (default: 128)", show_default=False)] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Run folder. (default: runs/SCHEME-SIZE-sSEED)", show_default=False)] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="Seed for initialisation, data order and masking. (default: 0)", show_default=False)] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the run in --out from its newest complete checkpoint.")] = False,
    eval_every: Annotated[int | None, typer.Option("--eval-every", min=1, help="Evaluate (loss, accuracy, Toeplitzness) every N steps. (default: 50)", show_default=False)] = None,
    save_every: Annotated[int | None, typer.Option("--save-every", min=1, help="Checkpoint every N steps. (default: --eval-every)", show_default=False)] = None,
    batch_size: Annotated[int | None, typer.Option("--batch-size", min=1, help="Blocks per step and device. (default: 16)", show_default=False)] = None,
    lr: Annotated[float | None, typer.Option("--lr", help="Peak learning rate. (default: 1e-3 tiny, 5e-4 small, 1e-4 base; a shape that of the first of them at least as wide)", show_default=False)] = None,
    vocab_size: Annotated[int | None, typer.Option("--vocab-size", min=100, help="Vocabulary of the trained tokenizer. (default: 8000)", show_default=False)] = None,
    kernels: Annotated[int | None, typer.Option("--kernels", min=1, help="TISA kernels per head. (default: 5)", show_default=False)] = None,
    precision: Annotated[Precision | None, typer.Option("--precision", help="auto: bf16/fp16 autocast on CUDA, fp32 on CPU. (default: auto)", show_default=False)] = None,
    keep: Annotated[int | None, typer.Option("--keep", min=2, help="Checkpoints to keep. (default: 2)", show_default=False)] = None,
    dropout: Annotated[float | None, typer.Option("--dropout", help="Hidden and attention dropout, 0 <= P < 1 (ALBERT v1: 0.1, v2: 0). (default: 0)", show_default=False)] = None,
    task: Annotated[str | None, typer.Option("--task", help="Train on an algorithmic task instead of text: copy, reverse, addition, parity, sorting or scan (a causal LM, loss on the answer; its own vocabulary; no --corpus).", show_default=False)] = None,
    train_length: Annotated[int | None, typer.Option("--train-length", min=1, help="--task: train on every length up to N (the task's own length: items, digits, actions). (default: the task's, Kazemnejad et al.: copy/reverse 20, addition/parity/sorting 8, scan 22)", show_default=False)] = None,
    test_length: Annotated[int | None, typer.Option("--test-length", min=1, help="--task: the longest length the model's positions cover, for posviz extrapolate --task. (default: the task's: 40, 16, scan 48)", show_default=False)] = None,
    examples: Annotated[int | None, typer.Option("--examples", min=1, help="--task: training examples per length. (default: 1000)", show_default=False)] = None,
    train_fraction: Annotated[float | None, typer.Option("--train-fraction", help="Train on this share of the training blocks, 0 < F <= 1 (a fixed subset; tokenizer and held-out set stay those of the whole corpus). (default: 1)", show_default=False)] = None,
) -> None:
    """Train an ALBERT-style masked LM (or causal LM) with a chosen positional scheme, tracking Toeplitzness.

    At every evaluation the run folder's trajectory.csv/.json get the held-out
    loss and accuracy (masked tokens, or next tokens with --objective causal), the
    Toeplitzness of E_P (absolute schemes, sinusoidal, TUPE's table) and of each
    head's positional scores. Checkpoints load with `posviz heatmap`,
    `posviz toeplitzness` and `posviz heads` (RoPE runs: per-head bands).

    Several processes or GPUs: torchrun --nproc_per_node N -m posviz train ...
    (--batch-size is per process; the main process writes the run folder).

    --task trains on an algorithmic task instead (copy, reverse, addition, parity,
    sorting, scan), with its own vocabulary: a causal LM whose loss is on the
    answer, evaluated by answer accuracy and exact match; `posviz extrapolate RUN
    --task NAME --lengths ...` then measures length generalisation.

    Example: posviz train --scheme tisa --steps 300   (the packaged corpus; or --corpus my-texts/)
    Example: posviz train --task copy --scheme none --steps 3000 --batch-size 64
    """
    from posviz.train.processes import training_processes
    from posviz.train.result import summary_lines

    given = {
        "scheme": scheme, "corpus": corpus or None, "tokenizer": tokenizer,
        "size": size, "steps": steps, "seq_len": seq_len, "seed": seed,
        "eval_every": eval_every, "save_every": save_every, "batch_size": batch_size, "learning_rate": lr,
        "vocab_size": vocab_size, "tisa_kernels": kernels, "precision": precision.value if precision else None, "keep": keep,
        "dropout": dropout, "train_fraction": train_fraction, "objective": objective.value if objective else None,
        "rope_base": rope_base, "rotary_fraction": rotary_fraction, "task": task, "train_length": train_length,
        "test_length": test_length, "task_examples": examples,
    }
    given = {k: v for k, v in given.items() if v is not None}
    with training_processes(report=report_error) as rank:  # every process, on every path, leaves through it (train.processes)
        options = _options(given, out, resume)
        result = _train(options, resume, main=rank == 0)
    if rank != 0:  # under torchrun only the main process reports
        return
    typer.echo("\n".join(summary_lines(result)))
    if result.options.task is not None:
        o = result.options
        typer.echo(f"next        posviz extrapolate {o.out} --task {o.task} --lengths {o.train_length},{o.test_length}   "
                   "(exact match within and beyond the trained length)")
    elif result.options.scheme == "rope":  # no table: its positions are in each head's frequency bands
        typer.echo(f"next        posviz heads {result.checkpoint}   (RoPE band energy and probe profile per head)")
    else:
        typer.echo(f"next        posviz heatmap {result.checkpoint}   (or: posviz toeplitzness {result.checkpoint})")


def _options(given: dict[str, Any], out: Path | None, resume: bool) -> Any:
    """The run's ``TrainOptions``: the options given, with those of the run to resume.

    Every process of a ``torchrun`` launch makes these checks alike, so their errors are marked
    as every process's (only the main process reports them).
    """
    from posviz.train.processes import checked_alike

    with checked_alike():
        return _checked_options(given, out, resume)


def _checked_options(given: dict[str, Any], out: Path | None, resume: bool) -> Any:
    from posviz.errors import OptionError
    from posviz.train.options import FIXED_OPTIONS, TrainOptions
    from posviz.train.run_folder import default_out, recorded_options

    if out is None:
        if not resume and "scheme" not in given:
            raise OptionError("give --scheme", "for example: posviz train --scheme tisa")
        if resume and "scheme" not in given:
            raise OptionError("give --out with --resume", "the folder of the run to continue")
        name = given["scheme"] if "task" not in given else f"{given['task']}-{given['scheme']}"
        out = default_out(name, given.get("size", "tiny"), given.get("seed", 0))
    base = recorded_options(out) if resume else {}
    if resume and not base:
        raise OptionError(f"no run to resume in {out} (no readable run.json)", "start it without --resume first")
    if resume and base:
        for key, value in given.items():
            if key in base and base[key] != value and key in FIXED_OPTIONS:
                raise OptionError(
                    f"--resume cannot change --{key.replace('_', '-')}: the run used {base[key]!r}, not {value!r}",
                    "drop the option, or start a new run with another --out",
                )
    merged = {**base, **given, "out": out}
    if "scheme" not in merged:
        raise OptionError("give --scheme", "for example: posviz train --scheme tisa")
    for key in ("rope_base", "rotary_fraction"):  # silently ignored options would be recorded as if they mattered
        if key in given and merged["scheme"] != "rope":
            raise OptionError(f"--{key.replace('_', '-')} applies to --scheme rope only, not {merged['scheme']}")
    if merged.get("task"):
        _check_task_options(given, merged)
        merged.setdefault("corpus", [])
    for key in ("train_length", "test_length", "task_examples"):
        if key in given and not merged.get("task"):
            raise OptionError(f"--{_TASK_FLAGS[key]} applies to --task runs only")
    if "corpus" not in merged:  # the packaged corpus: a run made without --corpus is the same run on every machine
        from posviz.train.corpus import DEMO_CORPUS

        merged["corpus"] = [DEMO_CORPUS]
    return TrainOptions(**merged)


_TASK_FLAGS = {"train_length": "train-length", "test_length": "test-length", "task_examples": "examples"}
#: Options of a run trained on text that a --task run sets itself, or has no use for.
_TEXT_ONLY = {"corpus": "--corpus", "tokenizer": "--tokenizer", "seq_len": "--seq-len", "vocab_size": "--vocab-size",
              "train_fraction": "--train-fraction"}


def _check_task_options(given: dict[str, Any], merged: dict[str, Any]) -> None:
    """A --task run has its own data, vocabulary and positions, and a causal objective: refuse what says otherwise."""
    from posviz.errors import OptionError

    for key, flag in _TEXT_ONLY.items():
        if key in given:
            raise OptionError(f"{flag} does not apply to a --task run",
                              "the task makes its data and vocabulary; --test-length sets the positions")
    if given.get("objective", "causal") != "causal":
        raise OptionError("a --task run is a causal LM (the loss is on the answer)", "drop --objective mlm")


def _train(options: Any, resume: bool, *, main: bool) -> Any:
    """Train; a ``TrainResult`` (in every process; only the main one shows progress)."""
    from posviz.train.loop import train

    display = _Display() if main else None  # one progress display, the main process's
    try:
        return train(options, resume=resume, on_update=display)
    finally:
        if display:
            display.stop()
