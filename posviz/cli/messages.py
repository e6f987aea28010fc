"""How the command line reports errors on stderr: one ``error: ...`` line, or a bug's traceback."""

from __future__ import annotations

import typer

#: The error line after Ctrl-C (exit code 130).
INTERRUPTED = "interrupted; no output was written"


def print_error(message: str) -> None:
    """Print ``error: MESSAGE`` on stderr as one line.

    Parameters
    ----------
    message
        What went wrong; runs of whitespace (newlines included) are written as one space.
    """
    typer.echo(f"error: {' '.join(message.split())}", err=True)


def report_error(error: BaseException) -> None:
    """Report ``error`` as ``posviz`` does (:mod:`posviz.cli.app`): one ``error:`` line, or a bug's traceback.

    For the ``report`` of :func:`posviz.train.processes.training_processes`, through which a
    training process that leaves alone reports before it ends.

    Parameters
    ----------
    error
        ``KeyboardInterrupt`` (written as :data:`INTERRUPTED`), a :class:`~posviz.errors.PosvizError`
        (its one line) or any other exception (a bug: its traceback).
    """
    import traceback

    from posviz.errors import PosvizError

    if isinstance(error, KeyboardInterrupt):
        print_error(INTERRUPTED)
    elif isinstance(error, PosvizError):
        print_error(str(error))
    else:
        traceback.print_exception(error)
