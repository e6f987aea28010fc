"""``posviz finetune``: fine-tune runs or Hugging Face models on downstream tasks; medians over seeds."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from posviz.cli.messages import report_error
from posviz.cli.options import TEXT_EXTENSIONS, OutputFormat, Precision


def _ints(text: str | None, option: str, example: str = "0,1,2") -> list[int] | None:
    from posviz.errors import OptionError

    if text is None:
        return None
    try:
        values = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise OptionError(f"{option} {text}: give whole numbers separated by commas, e.g. {example}") from None
    if not values:
        raise OptionError(f"{option} {text}: give at least one number")
    return values


def results_table(records: list[dict[str, Any]]) -> str:
    """Plain text: one line per source, step, task and metric with the median over seeds, min–max and n.

    A task scored by one metric shares its line with its equal ``score`` (``accuracy (= score)``).
    """
    from posviz.finetuning.results import shown_medians

    head = ("source", "step", "task", "metric", "median", "min–max", "n")
    cells = [(r["source"], "" if r.get("step") is None else str(r["step"]), r["task"], metric,
              f"{r['value']:.2f}", f"{r['min']:.2f}–{r['max']:.2f}", str(r["n"])) for r, metric in shown_medians(records)]
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h) for i, h in enumerate(head)]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    out = [line.format(*head), *(line.format(*c) for c in cells)]
    out.append("values in percent (accuracy, F1; Matthews, Pearson, Spearman × 100); score: the task's GLUE score "
               "(mean of its metrics); median, min–max and n over fine-tuning seeds")
    return "\n".join(s.rstrip() for s in out) + "\n"


def _progress(event: str, info: dict[str, Any]) -> None:
    where = f"{info['source']}" + (f"@{info['step']}" if info.get("step") is not None else "")
    if event == "reused":
        typer.echo(f"{where} {info['task']} seed {info['seed']}: finished earlier, reused", err=True)
    elif event == "done":
        shown = ", ".join(f"{k} {v:.2f}" for k, v in info["metrics"].items())
        typer.echo(f"{where} {info['task']} seed {info['seed']}: {shown}", err=True)


def command(
    sources: Annotated[list[str], typer.Argument(metavar="SOURCE", help="posviz train run folders (newest complete checkpoint), RUN@STEP, model folders or hub ids (org/name or org/name@revision).", show_default=False)],
    task: Annotated[list[str], typer.Option("--task", "-t", help="glue/NAME (sst2 mnli qqp stsb cola mrpc qnli rte), csv:PATH[,DEV], jsonl:PATH[,DEV], builtin/shuffled, builtin/bshift or builtin/replaced; repeatable.", show_default=False)],
    seeds: Annotated[str, typer.Option("--seeds", metavar="S1,S2,...", help="Fine-tuning seeds; medians over them.")] = "0",
    checkpoints: Annotated[str | None, typer.Option("--checkpoints", metavar="all|S1,S2,...", help="For runs: every kept checkpoint, or these steps.")] = None,
    steps: Annotated[int | None, typer.Option("--steps", min=1, help="Optimizer steps per seed (instead of --epochs).", show_default=False)] = None,
    epochs: Annotated[float, typer.Option("--epochs", help="Passes over the training set, when --steps is not given.")] = 3.0,
    lr: Annotated[float, typer.Option("--lr", help="Peak learning rate (linear warm-up over 10 %, linear decay).")] = 1e-4,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="Examples per step and process.")] = 32,
    max_length: Annotated[int, typer.Option("--max-length", min=8, help="Longest input in tokens (also capped by the model's positions).")] = 128,
    precision: Annotated[Precision, typer.Option("--precision", help="auto: bf16/fp16 autocast on CUDA, fp32 on CPU.")] = Precision.auto,
    train_size: Annotated[int | None, typer.Option("--train-size", min=1, help="At most this many training examples (a fixed subset; builtin: how many to make, default 4000).", show_default=False)] = None,
    dev_size: Annotated[int | None, typer.Option("--dev-size", min=1, help="At most this many dev examples per split (builtin default 1000).", show_default=False)] = None,
    corpus: Annotated[list[str] | None, typer.Option("--corpus", help="Corpus of the builtin tasks (default: the run's pre-training corpus, else cpython-3.11.7-docstrings); repeatable.", show_default=False)] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Results folder for models that are not runs (runs keep theirs in RUN/finetune). (default: finetune-results)", show_default=False)] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue interrupted seeds from their last Trainer checkpoint (finished seeds are always reused).")] = False,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace results made with other settings instead of refusing.")] = False,
    fmt: Annotated[OutputFormat, typer.Option("--format", "-f", help="table, or json/csv: one record per source, task, seed and metric plus the median rows.")] = OutputFormat.table,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the table/records here (.txt, .csv, .json) instead of stdout.", show_default=False)] = None,
) -> None:
    """Fine-tune pre-trained models on downstream tasks; report medians over seeds.

    Results are stored per checkpoint and task (RUN/finetune/step-N/TASK.json, or
    OUT/finetune/model/TASK.json) with their settings: a rerun with the same
    settings reuses finished seeds. Several processes or GPUs: torchrun
    --nproc_per_node N -m posviz finetune ... (--batch-size is per process).

    Example: posviz finetune runs/tisa-tiny-s0 --task builtin/bshift --seeds 0,1,2 --steps 300
    """
    from posviz.finetuning.finetune import finetune
    from posviz.train.processes import process_rank, training_processes
    from posviz.util.atomic import check_output_path
    from posviz.util.tables import emit, to_csv, to_json

    kind = fmt.value
    if output is not None:
        check_output_path(output, tuple(TEXT_EXTENSIONS))
        kind = TEXT_EXTENSIONS[output.suffix.lower()] if fmt is OutputFormat.table else kind
    picked: str | list[int] | None = checkpoints if checkpoints in (None, "all") else _ints(checkpoints, "--checkpoints", "200,400, or all")
    main = process_rank() == 0
    with training_processes(report=report_error) as rank:  # every process leaves through it, on every path (train.processes)
        records = finetune(sources, tasks=task, seeds=_ints(seeds, "--seeds") or [0], checkpoints=picked, steps=steps,
                           epochs=epochs, lr=lr, batch_size=batch_size, max_length=max_length, precision=precision.value,
                           train_size=train_size, dev_size=dev_size, corpus=corpus, out=out, resume=resume,
                           overwrite=overwrite, on_update=_progress if main else None)
    if rank != 0:  # under torchrun only the main process reports
        return
    text = to_json(records) if kind == "json" else to_csv(records) if kind == "csv" else results_table(records)
    emit(text, output)
