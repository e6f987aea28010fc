"""The data of a ``posviz train --task`` run: the task's tokenizer, its examples, batches padded to their longest
example, and the metrics of an evaluation (token accuracy and exact match on the answer).

A task run trains a causal LM on ``[BOS] question [SEP] answer [EOS]`` with the loss on the answer and ``[EOS]``
only (the other labels are ``-100``). Its examples come from :func:`posviz.tasks.make_split`: the training split
``count`` examples at every length up to ``--train-length`` (data seed 0, the same for every ``--seed``: seeds
differ by initialisation and order only, as corpus runs do), the held-out split 256 examples spread over the same
lengths. Their SHA-256 go into ``run.json``; ``--resume`` and ``posviz extrapolate --task`` refuse other data.
The model's positions cover the longest sequence of ``--test-length`` (:func:`posviz.tasks.task_positions`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from posviz.tasks import TaskSplit
    from posviz.train.data import RunData
    from posviz.train.options import TrainOptions

#: The data seed of every task split a run trains and evaluates on (the run's ``--seed`` changes the model only).
TASK_DATA_SEED = 0


def task_tokenizer(task: str, model_max_length: int) -> Any:
    """A fast tokenizer whose ids are :func:`posviz.tasks.task_vocabulary`: one symbol per whitespace-separated word.

    Saved with a task run, so that every posviz command reads the run as any other (``posviz attention RUN`` on
    ``"a b c"`` sees three symbols); a word outside the task is ``[UNK]``.
    """
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from posviz.tasks import task_vocabulary

    core = Tokenizer(models.WordLevel(vocab=task_vocabulary(task), unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=core, model_max_length=model_max_length, pad_token="[PAD]",
                                   bos_token="[BOS]", cls_token="[BOS]", sep_token="[SEP]", eos_token="[EOS]",
                                   unk_token="[UNK]")


class TaskExamples:
    """A map-style dataset of encoded examples: ``input_ids`` and their ``labels`` (the answer and ``[EOS]``; ``-100``
    elsewhere), as lists of ids of their own length."""

    def __init__(self, split: TaskSplit) -> None:
        self.items: list[tuple[list[int], list[int]]] = []
        for n in sorted(split.examples):
            for ids, start in split.encode(n):
                self.items.append((ids, [-100] * start + ids[start:]))

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, Any]:
        ids, labels = self.items[i]
        return {"input_ids": ids, "labels": labels}


class TaskCollator:
    """Batches of examples padded on the right to their longest, the padding unscored.

    No attention mask is needed: under the causal mask a real token never sees the padding after it, and SDPA keeps
    its fused causal kernel.
    """

    def __init__(self, pad_token_id: int) -> None:
        self.pad_token_id = pad_token_id

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        import torch

        width = max(len(e["input_ids"]) for e in examples)
        ids = torch.full((len(examples), width), self.pad_token_id, dtype=torch.long)
        labels = torch.full((len(examples), width), -100, dtype=torch.long)
        for row, e in enumerate(examples):
            ids[row, : len(e["input_ids"])] = torch.tensor(e["input_ids"])
            labels[row, : len(e["labels"])] = torch.tensor(e["labels"])
        return {"input_ids": ids, "labels": labels}


def answer_scores(preds: Any, labels: Any) -> tuple[Any, Any]:
    """Per example: answer tokens predicted right (the argmax at ``i`` against the label at ``i + 1``), and whether all were.

    Under teacher forcing; that every answer token and ``[EOS]`` is the argmax given the answer before it is exactly
    the condition for greedy decoding to write the answer and stop (by induction over its tokens), so ``exact`` is
    greedy exact match, from one forward pass.

    Parameters
    ----------
    preds, labels
        ``(examples, n)`` arrays: argmax ids, and labels (``-100`` where not scored).

    Returns
    -------
    correct, exact
        ``(examples,)``: the number of scored tokens right, and whether every scored token is.
    """
    import numpy as np

    hit, keep = preds[:, :-1] == labels[:, 1:], labels[:, 1:] != -100
    return (hit & keep).sum(axis=1), np.all(hit | ~keep, axis=1)


def task_metrics(eval_pred: Any) -> dict[str, float]:
    """``compute_metrics`` of a task run: answer-token accuracy and exact match (:func:`answer_scores`)."""
    preds, labels = eval_pred.predictions, eval_pred.label_ids
    correct, exact = answer_scores(preds, labels)
    scored = int((labels[:, 1:] != -100).sum())
    return {"accuracy": float(correct.sum() / scored) if scored else float("nan"), "exact_match": float(exact.mean())}


def task_splits(options: TrainOptions) -> tuple[TaskSplit, TaskSplit]:
    """The training and held-out splits of a task run (:data:`TASK_DATA_SEED`)."""
    from posviz.tasks import make_split, task_lengths

    lengths = task_lengths(options.task, options.train_length)
    per_length = max(1, options.max_eval_blocks // len(lengths))
    return (make_split(options.task, lengths, options.task_examples, seed=TASK_DATA_SEED, purpose="train"),
            make_split(options.task, lengths, per_length, seed=TASK_DATA_SEED, purpose="valid"))


def prepare_task_data(options: TrainOptions, *, resume: bool, main: bool = True, world_size: int = 1) -> RunData:
    """:func:`posviz.train.data.prepare_run_data` for a task run: its tokenizer, examples and ``run.json``.

    ``run.json`` records both splits' identity (:meth:`posviz.tasks.TaskSplit.identity`); its ``data_fingerprint``
    is the training split's SHA-256, so that ``--resume`` refuses other data.
    """
    from posviz.train import run_folder as folder
    from posviz.train.data import RunData

    train_split, eval_split = task_splits(options)
    tokenizer = task_tokenizer(options.task, options.seq_len)
    info = {**options.to_json(), "task_data": {"train": train_split.identity(), "valid": eval_split.identity()},
            "data_fingerprint": train_split.sha256[:16], "train_blocks": sum(map(len, train_split.examples.values())),
            "eval_blocks": sum(map(len, eval_split.examples.values())), "world_size": world_size,
            "global_batch_size": world_size * options.batch_size}
    if resume or not main:
        folder.check_same_data(options.out, info)
    if main:
        if resume:
            folder.warn_changed_processes(options.out, world_size)
        folder.start_run_folder(options.out, info, tokenizer)
    return RunData(tokenizer, TaskExamples(train_split), TaskExamples(eval_split), info)


def recorded_task(run: str | Path) -> dict[str, Any] | None:
    """What a run folder's ``run.json`` says of its task (``task``, ``train_length``, ``test_length``, ``task_data``),
    or ``None`` for a run trained on text."""
    import json

    from posviz.read.runs import RUN_FILE

    path = Path(run) / RUN_FILE
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or not info.get("task"):
        return None
    return {k: info.get(k) for k in ("task", "train_length", "test_length", "task_examples", "task_data")}
