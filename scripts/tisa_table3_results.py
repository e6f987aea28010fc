"""The ``finetune`` phase of ``scripts/tisa_table3.py``: fine-tune every run, then tabulate.

Fine-tunes every pre-trained run's last checkpoint on the tasks with every
fine-tuning seed, and the curve configurations' checkpoints along pre-training
(fine-tuning seed 0 only, to keep the CPU budget), through :func:`posviz.finetune`,
which keeps its results inside each run folder and reuses every finished
(checkpoint, task, seed). Then :func:`tisa_table3_tabulate.tabulate` writes the
tables and figures into ``--results``.
"""

from __future__ import annotations

import sys
from pathlib import Path


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def finetune_and_tabulate(args, runs) -> list[Path]:
    """Fine-tune each pre-trained run of ``runs`` (``(config, seed, folder)``), then write the results; the paths."""
    from tisa_table3_tabulate import runs_by_config, tabulate

    import posviz

    for config, _seed, run in runs:
        if not (run / "trajectory.json").is_file():
            _say(f"{run.name}: not pre-trained yet, skipped")
            continue
        curve = config.label in args.curve_configs
        steps = sorted({*args.curve_steps, args.steps}) if curve else [args.steps]
        _say(f"{run.name}: fine-tuning step {args.steps} on {', '.join(args.tasks)}, seeds {args.finetune_seeds}")
        posviz.finetune([str(run)], tasks=args.tasks, seeds=args.finetune_seeds, steps=args.finetune_steps,
                        checkpoints=[args.steps])
        if curve:
            _say(f"{run.name}: fine-tuning along pre-training, steps {steps}, seed 0")
            posviz.finetune([str(run)], tasks=args.tasks, seeds=[0], steps=args.finetune_steps, checkpoints=steps)
    return tabulate(runs_by_config(args.out), Path(args.results), curve=tuple(args.curve_configs))
