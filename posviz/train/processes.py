"""One training process or several (``torchrun``): who decides, who writes, who waits, how all leave.

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
function here simply calls through.

Every process leaves through one exit path, :func:`training_processes`: on success,
on a user error, on a bug and on Ctrl-C it tears the process group down (the one
place that does), so that no gloo/NCCL thread outlives it into the interpreter's
exit (the cause of ``terminate called without an active exception``, SIGABRT), and
it decides what the process prints and its exit code. See ARCHITECTURE.md.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, TypeVar

from posviz.errors import PosvizError

T = TypeVar("T")
E = TypeVar("E", bound=BaseException)

#: Set on an exception that every process raises at the same point (an outcome shared by
#: the main process, or a check every process makes alike, :func:`every_process`): they leave together.
_EVERY_PROCESS = "_posviz_every_process"
#: Exit code of an interrupted command (128 + SIGINT), as the CLI's.
INTERRUPTED = 130


class MainProcessFailed(PosvizError):
    """In the other processes: the main process stopped on a bug (it prints the traceback)."""

    exit_code = 1


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
    from posviz.train.collectives import broadcast_object

    if outcome is not None and outcome[0] == "failure":
        shared: Any = ("error", MainProcessFailed(f"the main process stopped: {type(outcome[1]).__name__}: {outcome[1]}"))
    else:
        shared = outcome
    return broadcast_object(shared, src=0)


def _unwrap(outcome: tuple[str, Any]) -> Any:
    """The value of a shared outcome, or its error raised (every process raises it here)."""
    kind, value = outcome
    if kind != "value":
        raise every_process(value)
    return value


def every_process(error: E) -> E:
    """Mark ``error`` as raised by every process at the same point; returns it, to be raised.

    For a check that every process makes alike (the options of ``posviz train``): the processes
    then leave together, and only the main process reports it (:func:`training_processes`).
    """
    setattr(error, _EVERY_PROCESS, True)
    return error


@contextmanager
def checked_alike() -> Iterator[None]:
    """Checks that every process makes alike: a :class:`PosvizError` raised inside is marked with :func:`every_process`."""
    try:
        yield
    except PosvizError as e:
        raise every_process(e) from None


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


def _exit_code(error: BaseException, interrupted: bool) -> int:
    """The CLI's exit code for ``error`` (see :mod:`posviz.cli.app`)."""
    if interrupted or isinstance(error, KeyboardInterrupt):
        return INTERRUPTED
    if isinstance(error, SystemExit):
        return error.code if isinstance(error.code, int) else (0 if error.code is None else 1)
    if isinstance(error, PosvizError):
        return error.exit_code
    return 1


def _group_started() -> bool:
    """Whether this process joined a process group (torch is not imported for the answer)."""
    if "torch.distributed" not in sys.modules:
        return False
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def _hold_signals() -> None:
    """From here on this process ends with its own exit code: the launcher's signals are ignored.

    ``torchrun`` forwards Ctrl-C to every process and sends SIGTERM to all of them as soon as
    one has ended; a process on its way out is neither interrupted twice nor killed half-way.
    Ignored, not blocked: a mask holds for one thread only, and any of gloo's or torch's threads
    could take a blocked signal with its default action (termination). SIGKILL, the launcher's
    last resort 30 s later, still ends a process that does not leave.
    """
    if threading.current_thread() is threading.main_thread():
        for s in (signal.SIGTERM, signal.SIGINT):
            signal.signal(s, signal.SIG_IGN)
    else:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})


def _exit_key() -> str:
    """The launcher's store key of the main process's exit code (restarts of ``torchrun`` get new ones)."""
    return f"posviz/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/exit"


def _leave(rank: int, code: int, *, together: bool) -> int | None:
    """Tear the process group down, if this process joined one (the only place that does it).

    ``together``: every process is on its way out at the same point; they meet once more,
    then leave. Otherwise this process leaves alone (a bug, an interruption, an error of one
    process): the main process first puts its exit ``code`` in the launcher's store, where the
    others look when their next collective fails because it has gone. Returns the main
    process's exit code when this is another process and the main process left first.
    """
    if not _group_started():
        return None
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    _hold_signals()
    main_code = None
    if together:
        dist.barrier()  # every process holds its signals: none is killed because another ended
    else:
        try:
            store = distributed_c10d._get_default_store()
            if rank == 0:
                store.set(_exit_key(), str(code))
            elif store.check([_exit_key()]):
                main_code = int(store.get(_exit_key()))
        except Exception:  # noqa: BLE001 - no store to ask (the main process hosted it): nothing to learn
            pass
    _bounded_destroy()  # joins gloo's threads; left to the interpreter's exit, they can abort it
    if together and rank != 0 and code != 0:
        _outlast_main(code)
    return main_code


#: Seconds a process waits for ``destroy_process_group`` before it ends with a stack dump and exit status 1.
DESTROY_LIMIT = 60.0


def _bounded_destroy(limit: float = DESTROY_LIMIT) -> None:
    """``destroy_process_group``, then the tensors of :mod:`posviz.train.collectives` let go; a hang past ``limit`` s
    ends the process loudly instead of forever.

    The cause of the one hang seen here (a gloo thread waiting for the GIL that the group's destructor holds) is
    avoided by :mod:`posviz.train.collectives`. Any other (pytorch/pytorch#75097) may hold the GIL too, so the guard
    is faulthandler's timer, a C thread that needs none: it prints every thread's stack to stderr and ends the
    process with exit status 1. Not 0: the main process may have its output still to write.
    """
    import faulthandler

    import torch.distributed as dist

    from posviz.train.collectives import release_held

    stream = sys.__stderr__  # the process's own stderr (a test runner may have swapped sys.stderr for a buffer)
    guarded = stream is not None and _has_fileno(stream)
    if guarded:
        faulthandler.dump_traceback_later(limit, exit=True, file=stream)
    try:
        dist.destroy_process_group()
    finally:
        if guarded:
            faulthandler.cancel_dump_traceback_later()
    release_held()


def _has_fileno(stream: Any) -> bool:
    try:
        stream.fileno()
    except (AttributeError, OSError, ValueError):
        return False
    return True


def _outlast_main(code: int, limit: float = 120.0) -> None:
    """A non-main process leaving with the others on an error: end after the main process.

    ``torchrun`` terminates every process as soon as one has failed and kills, 30 s later, any
    that has not ended. Were this process to end first, the main process (still reporting the
    error, then freeing torch) would be on that clock; on a loaded machine it can miss it. So
    this one waits: the launcher's SIGTERM, sent once the main process has ended, ends it with
    ``code``. Without ``torchrun``'s agent (``TORCHELASTIC_RUN_ID`` unset) nobody would send
    it, and the process leaves at once; after ``limit`` seconds it leaves anyway.
    """
    if "TORCHELASTIC_RUN_ID" not in os.environ or threading.current_thread() is not threading.main_thread():
        return
    signal.signal(signal.SIGTERM, lambda signum, frame: _end_now(code))
    time.sleep(limit)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _end_now(code: int) -> None:
    """End this process at once with ``code``, running no destructor and no exit handler.

    For a process leaving alone: objects still holding the process group (DDP's reducer) may
    own a gloo thread blocked in a collective whose peer has gone, and freeing them would wait
    for it (until the launcher's SIGKILL, 30 s later).
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


@contextmanager
def training_processes(report: Callable[[BaseException], None] | None = None) -> Iterator[int]:
    """The one exit path of a training command, in every process; yields this process's rank.

    On every way out (success, a user error, a bug, Ctrl-C) the process group is torn down
    here and only here (:func:`_leave`). With several processes (``torchrun``) the main
    process (rank 0) reports and the others end with its exit code in silence: after a user
    error raised in every process (a choice the main process shared, or a check marked with
    :func:`every_process`), after the main process stopped alone (their next collective
    fails; SIGTERM from the launcher waits until then), and after Ctrl-C (exit code 130,
    whatever error the interruption causes). An error of one of the other processes alone is
    raised there (it is news).

    Parameters
    ----------
    report
        How the command reports an error (its one ``error:`` line, or a traceback). Given, a
        process that leaves alone (a bug, Ctrl-C, an error of one process) reports through it and
        ends at once (:func:`_end_now`) instead of raising.
    """
    rank = process_rank()
    several = world_size() > 1
    interrupted: list[int] = []

    def on_signal(signum: int, frame: Any) -> None:
        if several:
            _hold_signals()  # torchrun forwards Ctrl-C, then terminates: one stop is enough
        interrupted.append(signum)
        raise KeyboardInterrupt

    main_thread = threading.current_thread() is threading.main_thread()
    handled = (signal.SIGINT, signal.SIGTERM) if several else (signal.SIGINT,)
    previous = {s: signal.signal(s, on_signal) for s in handled} if main_thread else {}
    try:
        yield rank
    except BaseException as error:
        group = _group_started()
        together = bool(getattr(error, _EVERY_PROCESS, False))
        if several and together and not group:
            group = _meet_to_leave()  # a check failed in every process before they met
        code = _exit_code(error, bool(interrupted))
        main_code = _leave(rank, code, together=together and group)
        if several and group and not together and report is not None:  # leaving alone: end now
            if rank != 0 and (main_code is not None or interrupted):
                _end_now(main_code if main_code is not None else code)  # the main process reports
            report(KeyboardInterrupt() if interrupted else error)
            _end_now(code)
        if several and rank != 0:
            if main_code is not None:
                raise SystemExit(main_code) from None  # the main process stopped first, and reports why
            if together or interrupted:
                raise SystemExit(code) from None  # the main process reports it
        if interrupted and not isinstance(error, KeyboardInterrupt):
            raise KeyboardInterrupt from None  # the error was a consequence of the interruption
        raise
    else:
        _leave(rank, 0, together=True)
    finally:
        for s, handler in previous.items():
            if signal.getsignal(s) is not signal.SIG_IGN:  # ignored once leaving: the process ends as it decided
                signal.signal(s, handler)


def _meet_to_leave() -> bool:
    """Start a process group only to leave together (see :func:`_leave`); False if it cannot be had in 60 s."""
    import torch.distributed as dist

    try:
        dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    except Exception:  # noqa: BLE001 - then each process leaves alone, as it would have
        return False
    return True


def world_size() -> int:
    """The number of processes as ``torchrun`` sets it (``WORLD_SIZE``); 1 when not launched by it."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 1
