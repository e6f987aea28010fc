"""The log of a ``posviz train`` run: held-out MLM metrics and Toeplitzness per evaluation.

Written at every evaluation (atomically) into the run folder as
``trajectory.json`` (run options + one record per evaluation) and
``trajectory.csv`` (the same records, one row each, per-head values as columns
``toeplitzness_head_H``). The records come from the Trainer's ``log_history``,
which every checkpoint stores, so a resumed run's log continues exactly from its
checkpoint. This module imports no torch: plots read runs cheaply.

Record fields: ``step``, ``train_loss`` (latest logged at or before ``step``),
``eval_loss``, ``eval_accuracy`` (masked-token accuracy on the fixed, pre-masked
held-out set; a task run: answer-token accuracy, with ``eval_exact_match``, the share of
answers entirely right), ``toeplitzness_ep`` / ``toeplitzness_ep_offdiag`` / ``null_ep`` /
``excess_ep`` (R² of P = E_P E_Pᵀ, full and off-diagonal variants, the
full variant's row-permutation null mean and its excess), ``null_ep_offdiag`` /
``excess_ep_offdiag`` (the same for the off-diagonal variant; all E_P fields are
absent without a table) and
``toeplitzness_heads`` (R² of each head's positional scores in layer 0, from
:func:`posviz.models.positional_scores`) with their mean ``toeplitzness_heads_mean``,
and the mean of their off-diagonal R² ``toeplitzness_heads_offdiag_mean``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from posviz.errors import PosvizError
from posviz.read.runs import LOG_JSON

LOG_CSV = "trajectory.csv"

#: Keys copied from a Trainer evaluation entry into a record.
_POSVIZ_KEYS = (
    "toeplitzness_ep", "toeplitzness_ep_offdiag", "null_ep", "excess_ep", "null_ep_offdiag", "excess_ep_offdiag",
    "toeplitzness_heads", "toeplitzness_heads_mean", "toeplitzness_heads_offdiag_mean",
)


class TrajectoryPoint(NamedTuple):
    """One evaluation of a run: ``(step, toeplitzness, eval_accuracy, eval_loss)``."""

    step: int
    toeplitzness: float
    eval_accuracy: float
    eval_loss: float


def evaluation_records(log_history: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One record per evaluated step (the last one wins), sorted by step.

    Parameters
    ----------
    log_history
        ``TrainerState.log_history``: training entries (``loss``) and evaluation
        entries (``eval_loss`` plus the Toeplitzness fields the callback adds).
    """
    train_loss: dict[int, float] = {}
    evals: dict[int, Mapping[str, Any]] = {}
    for e in log_history:
        step = int(e.get("step", 0))
        if "loss" in e:
            train_loss[step] = float(e["loss"])
        if "eval_loss" in e:
            evals[step] = e
    records = []
    for step in sorted(evals):
        e = evals[step]
        earlier = [s for s in train_loss if s <= step]
        rec: dict[str, Any] = {
            "step": step,
            "train_loss": train_loss[max(earlier)] if earlier else None,
            "eval_loss": float(e["eval_loss"]),
            "eval_accuracy": e.get("eval_accuracy"),
        }
        if "eval_exact_match" in e:  # a task run (posviz train --task): answers entirely right
            rec["eval_exact_match"] = e["eval_exact_match"]
        rec.update({k: e[k] for k in _POSVIZ_KEYS if k in e})
        records.append(rec)
    return records


def _clean(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, list):
        return [_clean(v) for v in x]
    return x


def write_logs(run_dir: str | Path, records: list[dict[str, Any]], run: Mapping[str, Any]) -> None:
    """Write ``trajectory.json`` and ``trajectory.csv`` atomically."""
    from posviz.util.atomic import write_text_atomic
    from posviz.util.tables import to_csv

    run_dir = Path(run_dir)
    doc = {"run": dict(run), "evaluations": [{k: _clean(v) for k, v in r.items()} for r in records]}
    write_text_atomic(run_dir / LOG_JSON, json.dumps(doc, indent=2) + "\n")
    rows = []
    for r in records:
        row = {k: v for k, v in r.items() if k != "toeplitzness_heads"}
        for h, v in enumerate(r.get("toeplitzness_heads") or []):
            row[f"toeplitzness_head_{h}"] = v
        rows.append(row)
    write_text_atomic(run_dir / LOG_CSV, to_csv(rows) if rows else "step\n")


def load_run_log(run_dir: str | Path) -> dict[str, Any]:
    """The parsed ``trajectory.json`` of a run folder (``{"run": ..., "evaluations": [...]}``).

    Raises
    ------
    PosvizError
        If the folder has no readable log.
    """
    path = Path(run_dir) / LOG_JSON
    if not path.is_file():
        raise PosvizError(f"{run_dir}: no {LOG_JSON}", "pass the --out folder of a `posviz train` run")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(doc, dict) or not isinstance(doc.get("evaluations"), list):
            raise ValueError("unexpected layout")
    except (OSError, ValueError) as e:
        raise PosvizError(f"{path}: cannot read the training log: {e}") from None
    return doc


def load_trajectory(run_dir: str | Path, *, measure: str = "auto", exclude_diagonal: bool = True) -> list[TrajectoryPoint]:
    """A run's Toeplitzness trajectory as ``(step, toeplitzness, eval_accuracy, eval_loss)`` tuples.

    Parameters
    ----------
    run_dir
        The ``--out`` folder of a ``posviz train`` run.
    measure
        ``ep``: Toeplitzness of P = E_P E_Pᵀ; ``heads``: mean over layer-0 heads
        of the positional scores; ``auto``: ``ep`` where the scheme has a table
        (absolute, absolute+tisa, TUPE), else ``heads``.
    exclude_diagonal
        The off-diagonal R² (default, posviz's headline variant; NaN for runs
        logged before it was recorded) or the full R².

    Examples
    --------
    >>> load_trajectory("runs/absolute-tiny-s0")  # doctest: +SKIP
    [TrajectoryPoint(step=0, toeplitzness=0.41, eval_accuracy=0.0, eval_loss=9.0), ...]
    """
    if measure not in ("auto", "ep", "heads"):
        raise ValueError("measure must be auto, ep or heads")
    points = []
    ep, heads = ("toeplitzness_ep_offdiag", "toeplitzness_heads_offdiag_mean") if exclude_diagonal else ("toeplitzness_ep", "toeplitzness_heads_mean")
    for r in load_run_log(run_dir)["evaluations"]:
        key = heads if measure == "heads" else ep
        if measure == "auto" and r.get("toeplitzness_ep") is None:
            key = heads
        t = r.get(key)
        acc = r.get("eval_accuracy")
        points.append(TrajectoryPoint(
            int(r["step"]),
            float("nan") if t is None else float(t),
            float("nan") if acc is None else float(acc),
            float(r["eval_loss"]),
        ))
    return points
