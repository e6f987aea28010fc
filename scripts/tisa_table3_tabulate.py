"""The results of ``scripts/tisa_table3.py``: Table 3, TUPE-A against absolute, and the score along pre-training.

Reads the fine-tuning results of every run folder (``RUN/finetune/step-STEP/*.json``,
written by ``posviz finetune``) and writes, atomically, into the results folder:

* ``table3.md`` / ``.csv`` / ``.json`` and ``table3.png``: TISA's Table 3 layout, arms
  (a) absolute against absolute+TISA and (b) none against TISA without E_P, at S = 1, 3, 5;
  each cell the median over pre-training seeds of each run's median over fine-tuning
  seeds, with the min–max over pre-training seeds, then |Δ| and Δ%
  (:func:`posviz.finetuning.tables.table3`);
* ``tupe.md`` / ``.csv`` / ``.json``: TUPE-A against the absolute baseline, in the same layout;
* ``overview.md``: every configuration side by side, one column each (the README's table);
* ``score-by-step.csv`` / ``.json`` and ``score-by-step.png``: the mean task score against the
  pre-training step for the runs fine-tuned along pre-training (absolute and TUPE-A),
  mean and min–max over pre-training seeds (:func:`posviz.finetuning.tables.score_by_step`);
* ``figure2.csv`` / ``.json`` / ``.md`` and ``figure2.png``: TISA's Figure 2 with these runs, the
  Toeplitzness of E_P against the mean downstream score (``tisa_table3_figure2``).

Usage: ``python scripts/tisa_table3_tabulate.py [--out runs/tisa-table3] [--results reports/tisa-table3]``
(``scripts/tisa_table3.py`` calls :func:`tabulate` after fine-tuning). Run labels are the
folder names without their seed: ``a-baseline-s0`` is configuration ``a-baseline``, seed 0.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: The two arms of the paper's Table 3, by configuration label (baseline first).
ARMS = {"a": ["a-baseline", "a-S1", "a-S3", "a-S5"], "b": ["b-baseline", "b-S1", "b-S3", "b-S5"]}
#: TUPE-A against the absolute baseline.
TUPE_ARMS = {"tupe": ["a-baseline", "tupe-A"]}
TUPE_COLUMNS = ("absolute", "TUPE-A")
#: The overview's columns: (configuration, header) in the README's order.
OVERVIEW_COLUMNS = (("a-baseline", "(a) absolute"), ("a-S1", "+ TISA S=1"), ("a-S3", "S=3"), ("a-S5", "S=5"),
                    ("b-baseline", "(b) none"), ("b-S1", "TISA S=1"), ("b-S3", "S=3"), ("b-S5", "S=5"), ("tupe-A", "TUPE-A"))
#: The overview's rows: (task, label) in the README's order; tasks not listed follow under their own name.
OVERVIEW_TASKS = (("builtin/shuffled", "shuffled (word order)"), ("builtin/bshift", "bshift (word order)"),
                  ("builtin/replaced", "replaced (content only)"), ("average", "average"))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling tisa_table3_figure2, however this is loaded

from tisa_table3_figure2 import COLORS, RUN_NAME, figure2, figure2_markdown  # noqa: E402


def runs_by_config(out: Path) -> dict[str, list[Path]]:
    """``{configuration: [run folder, ...]}`` of the run folders under ``out`` (named ``CONFIG-sSEED``)."""
    found: dict[str, list[Path]] = {}
    for run in sorted(p for p in out.iterdir() if p.is_dir()) if out.is_dir() else []:
        m = RUN_NAME.match(run.name)
        if m:
            found.setdefault(m["config"], []).append(run)
    return found


def _write(path: Path, text: str) -> None:
    from posviz.util.atomic import write_text_atomic

    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, text)


def _write_rows(stem: Path, rows: Sequence[dict[str, Any]]) -> None:
    from posviz.util.tables import to_csv, to_json

    _write(stem.with_suffix(".csv"), to_csv(rows))
    _write(stem.with_suffix(".json"), to_json(rows))


def _cells(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> dict[tuple[str, str], str]:
    """``{(task, configuration): "median (min–max)"}`` from Table 3 rows (their ``COLUMN config`` names the run)."""
    from posviz.finetuning.tables import table3_cell

    return {(r["task"], r[f"{c} config"]): table3_cell(r, c) for r in rows for c in columns if r.get(c) is not None}


def overview_markdown(table3_rows: Sequence[dict[str, Any]], tupe_rows: Sequence[dict[str, Any]]) -> str:
    """Every configuration side by side: one line per task, one column per configuration (``–`` where missing).

    A cell is the median over pre-training seeds with their min–max, as in ``table3.md``.
    """
    from posviz.finetuning.tables import TABLE3_COLUMNS

    cells = {**_cells(table3_rows, TABLE3_COLUMNS), **_cells(tupe_rows, TUPE_COLUMNS)}
    labels = dict(OVERVIEW_TASKS)
    tasks = [t for t, _ in OVERVIEW_TASKS if any(k[0] == t for k in cells)]
    tasks += sorted({t for t, _ in cells} - set(labels), key=lambda t: (t == "average", t))
    header = ["task"] + [h for _, h in OVERVIEW_COLUMNS]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for task in tasks:
        row = [labels.get(task, task)] + [cells.get((task, config), "–") for config, _ in OVERVIEW_COLUMNS]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def tabulate(runs: dict[str, Sequence[Path]], results: Path, *, curve: Sequence[str] = ("a-baseline", "tupe-A")) -> list[Path]:
    """Write the tables and figures of the experiment into ``results``; the files written.

    Parameters
    ----------
    runs
        ``{configuration label: [run folder per pre-training seed]}``.
    results
        Folder of the outputs (created).
    curve
        Configurations whose runs were fine-tuned along pre-training.
    """
    from posviz.finetuning.tables import load_configs, score_by_step, table3, table3_markdown
    from posviz.plots.common import save_figure
    from posviz.plots.finetune import plot_score_by_step, plot_table3

    records = load_configs(runs)
    written: list[Path] = []
    rows = table3(records, ARMS)
    if rows:
        _write_rows(results / "table3", rows)
        _write(results / "table3.md", table3_markdown(rows))
        save_figure(plot_table3(rows, title="TISA's Table 3 in miniature: median over pre-training seeds of each run's "
                                "median over fine-tuning seeds; bars: min–max over pre-training seeds"), results / "table3.png")
        written += [results / f"table3{ext}" for ext in (".csv", ".json", ".md", ".png")]
    tupe = table3(records, TUPE_ARMS, columns=TUPE_COLUMNS)
    if tupe:
        _write_rows(results / "tupe", tupe)
        _write(results / "tupe.md", table3_markdown(tupe, columns=TUPE_COLUMNS))
        written += [results / f"tupe{ext}" for ext in (".csv", ".json", ".md")]
    if rows or tupe:
        _write(results / "overview.md", overview_markdown(rows, tupe))
        written.append(results / "overview.md")
    along = {c: records[c] for c in curve if records.get(c)}
    try:
        by_step = score_by_step(along) if along else []
    except ValueError as e:  # no task common to every checkpoint: say so, write the rest
        print(f"score by step left out: {e}", file=sys.stderr)
        by_step = []
    if by_step:
        _write_rows(results / "score-by-step", [{**r, "values": json.dumps(r["values"])} for r in by_step])
        save_figure(plot_score_by_step(by_step, colors=COLORS), results / "score-by-step.png")  # figure2's colours
        written += [results / f"score-by-step{ext}" for ext in (".csv", ".json", ".png")]
    rows, fig = figure2(runs, curve)
    if fig is not None:
        _write_rows(results / "figure2", rows)
        _write(results / "figure2.md", figure2_markdown(rows))
        save_figure(fig, results / "figure2.png")
        written += [results / f"figure2{ext}" for ext in (".csv", ".json", ".md", ".png")]
    return written


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("runs/tisa-table3"), help="folder of the runs (default: %(default)s)")
    p.add_argument("--results", type=Path, default=Path("reports/tisa-table3"), help="folder of the results (default: %(default)s)")
    p.add_argument("--curve-configs", nargs="+", default=["a-baseline", "tupe-A"], help="runs fine-tuned along pre-training")
    args = p.parse_args(argv)
    written = tabulate(runs_by_config(args.out), args.results, curve=args.curve_configs)
    if not written:
        print(f"error: no fine-tuning results under {args.out} (hint: run scripts/tisa_table3.py --phase finetune first)",
              file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
