"""One training process or several (``torchrun``): who decides, who writes, who waits.

Under ``torchrun --nproc_per_node N -m posviz train ...`` every process runs
:func:`posviz.train.loop.train`; Trainer wraps the model in DDP and gives each
process its own blocks of every step (global batch = N × ``--batch-size``).
The run folder keeps one writer, the main process (rank 0):

* it alone checks the run folder and chooses the checkpoint to resume from (it
  may move a corrupt one aside); the others receive its choice (:func:`decided_by_main`);
* it builds the tokenizer and writes ``run.json`` and ``tokenizer/`` before the
  others read them (:func:`main_first`);
* it alone writes ``trajectory.*`` and the checkpoint manifests, the latter after
  a :func:`barrier`, once every process has saved its RNG state into the checkpoint.

An error in the main process during these steps is raised in every process, so
that all of them stop instead of waiting for each other. With one process every
function here simply calls through. See ARCHITECTURE.md.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

from posviz.errors import PosvizError

T = TypeVar("T")


def process_rank() -> int:
    """This process's rank as ``torchrun`` sets it (``RANK``); 0 when not launched by it."""
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def _attempt(work: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "value", work()
    except PosvizError as e:
        return "error", e
    except Exception as e:  # a bug: the main process keeps its traceback, the others stop too
        return "failure", e


def _share(outcome: tuple[str, Any] | None) -> tuple[str, Any]:
    """The main process's outcome, in every process (a collective call: all processes make it)."""
    import torch.distributed as dist

    if outcome is not None and outcome[0] == "failure":
        shared: Any = ("error", PosvizError(f"the main process stopped: {type(outcome[1]).__name__}: {outcome[1]}"))
    else:
        shared = outcome
    box = [shared]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def _unwrap(outcome: tuple[str, Any]) -> Any:
    kind, value = outcome
    if kind != "value":
        raise value
    return value


def decided_by_main(args: Any, decide: Callable[[], T]) -> T:
    """``decide()`` in the main process; the others receive its result, or raise its error.

    Parameters
    ----------
    args
        The run's ``TrainingArguments`` (their ``world_size`` and ``process_index``).
    decide
        Called in the main process only; its result must pickle.
    """
    if args.world_size <= 1:
        return decide()
    main = args.process_index == 0
    outcome = _attempt(decide) if main else None
    shared = _share(outcome)
    return _unwrap(outcome if main else shared)


def main_first(args: Any, work: Callable[[], T]) -> T:
    """``work()`` in the main process, then in the others (which can read what it wrote).

    An error of the main process is raised in every process; the others then never call ``work``.
    """
    if args.world_size <= 1:
        return work()
    if args.process_index == 0:
        outcome = _attempt(work)
        _share(None if outcome[0] == "value" else outcome)  # the result itself stays here
        return _unwrap(outcome)
    _unwrap(_share(None) or ("value", None))
    return work()


def barrier(args: Any) -> None:
    """Wait until every process got here (no-op with one process)."""
    if args.world_size > 1:
        import torch.distributed as dist

        dist.barrier()


def leave_process_group() -> None:
    """Leave the process group this process joined under ``torchrun``, if any (else do nothing).

    Called once a command's training is over: the processes finish together, and gloo's
    threads are joined before the interpreter tears down (a group left alive can abort the
    process at exit with ``terminate called without an active exception``).
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
