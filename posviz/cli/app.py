"""The ``posviz`` command line (Typer).

Kept thin and fast: each command lives in :mod:`posviz.cli` and imports
numpy, matplotlib or torch only when it runs, so ``posviz --help`` starts quickly.
Errors a user can fix print one ``error: ...`` line and exit with code 2
(``--debug`` shows the traceback instead).
"""

from __future__ import annotations

import sys
import warnings
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

try:  # recent typer releases vendor click; older ones use the click package
    from typer._click import exceptions as _click_exc
except ImportError:  # pragma: no cover
    from click import exceptions as _click_exc

from posviz.cli import (
    attention,
    explore,
    extrapolate,
    finetune,
    heads,
    heatmap,
    hidden,
    measure,
    measures,
    report,
    toeplitzness,
    train,
    trajectory,
)
from posviz.cli.messages import INTERRUPTED, print_error
from posviz.errors import PosvizError

_state = {"debug": False}


class _Group(TyperGroup):
    """Turns user errors (ours and click's) into one line and exit code 2; names the registry's measures in the help."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        from posviz.measures import measure_names  # entry-point names only: no measure is imported

        self.epilog = (f"Measures: {', '.join(measure_names())} (posviz measures lists them; posviz trajectory --measure "
                       "NAME runs one along checkpoints; other packages add theirs, docs/extending.md).")
        super().format_help(ctx, formatter)

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra: Any) -> Any:
        _state["debug"] = False
        try:
            rv = super().main(args=args, prog_name=prog_name or "posviz", complete_var=complete_var, standalone_mode=False, **extra)
        except PosvizError as e:
            if _state["debug"]:
                raise
            print_error(str(e))
            rv = e.exit_code
        except _click_exc.UsageError as e:
            cmd = e.ctx.command_path if e.ctx else "posviz"
            if e.format_message():  # empty when the help was just shown (a command run without arguments)
                print_error(f"{e.format_message()} (see `{cmd} --help`)")
            rv = 2
        except typer.Abort:  # typer's own; typer._click.exceptions has none
            rv = 130
        except _click_exc.ClickException as e:
            print_error(e.format_message())
            rv = e.exit_code
        code = rv if isinstance(rv, int) else 0
        if code == 130:
            print_error(INTERRUPTED)
        if standalone_mode:
            sys.exit(code)
        return code


app = typer.Typer(
    cls=_Group,
    name="posviz",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        from posviz import __version__

        typer.echo(f"posviz {__version__}")
        raise typer.Exit()


def _warning_line(message, category, filename, lineno, file=None, line=None) -> None:
    typer.echo(f"warning: {' '.join(str(message).split())}", err=True)


@app.callback()
def _root(
    ctx: typer.Context,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version and exit.")] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks instead of one-line errors.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Say how many bytes were fetched from each Hub file.")] = False,
    full_download: Annotated[bool, typer.Option("--full-download", help="Download whole weight files from the Hub into the Hugging Face cache instead of the byte ranges needed (also: POSVIZ_FULL_DOWNLOAD=1).")] = False,
) -> None:
    """Analyse and visualise how transformer language models encode position.

    MODEL arguments accept a model folder, a .safetensors/.bin file, a Hugging Face
    hub id (org/name[@revision], read from the local cache first), or a synthetic
    control: sinusoidal[:NxD], gaussian[:NxD][:SEED]. From the Hub, only the byte
    ranges of the tensors read are fetched (see docs/hub-and-offline.md).
    """
    _state["debug"] = debug
    warnings.showwarning = _warning_line
    # transformers 4.4x announces a change of its own default on every tokenizer load; it says nothing about the
    # user's input, and shown once per process it would make a one-line error two lines only some of the time
    warnings.filterwarnings("ignore", message=".*clean_up_tokenization_spaces.*", category=FutureWarning)
    from posviz.hub import remote

    remote.configure(full_download=full_download, verbose=verbose)
    if verbose:
        ctx.call_on_close(_fetch_summary)


def _fetch_summary() -> None:
    from posviz.hub import remote

    for stats in remote.STATS.values():
        typer.echo(stats.summary(), err=True)


app.command("heatmap", no_args_is_help=True)(heatmap.command)
app.command("toeplitzness")(toeplitzness.command)
app.command("report", no_args_is_help=True)(report.command)
app.command("train")(train.command)
app.command("heads", no_args_is_help=True)(heads.command)
app.command("trajectory", no_args_is_help=True)(trajectory.command)
app.command("finetune", no_args_is_help=True)(finetune.command)
app.command("attention", no_args_is_help=True)(attention.command)
app.command("hidden", no_args_is_help=True)(hidden.command)
app.command("explore", no_args_is_help=True)(explore.command)
app.command("extrapolate", no_args_is_help=True)(extrapolate.command)
app.command("measure", no_args_is_help=True)(measure.command)
app.command("measures")(measures.command)


def main() -> None:
    """Console-script entry point."""
    app()
