"""``posviz`` with one event planted in the main process of a training run, for the tests of its exit paths.

Run as a script under ``torchrun`` (``python -m torch.distributed.run ... tests/train_exit_driver.py EVENT CODES
train ...``). Right after the main process has written the log of the evaluation at step 6 (a fixed point of the
run, not a moment in time), it does EVENT:

* ``interrupt``: sends SIGINT to the launcher, as Ctrl-C in a terminal does (``torchrun`` forwards it to every
  process, then waits for them);
* ``bug``: raises an exception that is not a user error;
* ``none``: nothing (the command's own exit paths, e.g. a user error, with every process's exit code recorded).

Every process writes the exit code the command ended with into ``CODES/rank-N``: the launcher does not report
exit codes when it is interrupted itself, and older ones (torch 2.2) list only the first process to fail, not the
others that it then stops.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path


def _plant(event: str) -> None:
    from posviz.train import callbacks

    original = callbacks.write_logs

    def write_logs(run_dir, records, run_info):
        original(run_dir, records, run_info)
        if records and records[-1]["step"] == 6:
            if event == "interrupt":
                os.kill(os.getppid(), signal.SIGINT)
            else:
                raise RuntimeError("a planted bug")

    callbacks.write_logs = write_logs


def main() -> None:
    event, codes = sys.argv[1], Path(sys.argv[2])
    if event != "none":
        _plant(event)
    from posviz.train import processes

    end_now = processes._end_now

    def record_and_end(code: int) -> None:  # a process that leaves alone ends at once (os._exit): record first
        (codes / f"rank-{os.environ.get('RANK', '0')}").write_text(str(code))
        end_now(code)

    processes._end_now = record_and_end
    sys.argv = ["posviz", *sys.argv[3:]]
    from posviz.cli.app import main as posviz_main

    try:
        posviz_main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        (codes / f"rank-{os.environ.get('RANK', '0')}").write_text(str(code))
        raise
    except BaseException as e:
        (codes / f"rank-{os.environ.get('RANK', '0')}").write_text(type(e).__name__)
        raise


if __name__ == "__main__":
    main()
