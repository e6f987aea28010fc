"""What a run does besides optimizing: evaluation metrics, Toeplitzness, logs, manifests, progress.

* :func:`masked_accuracy` (:func:`next_token_accuracy` for causal-LM runs) and
  :func:`argmax_logits`: the Trainer's ``compute_metrics`` and
  ``preprocess_logits_for_metrics``;
* :func:`measure_positions`: the Toeplitzness of a live model (the one place the
  training code calls the Toeplitz scoring);
* :func:`make_callbacks`: Trainer callbacks that add those fields to each
  evaluation and rewrite ``trajectory.csv``/``.json`` (:mod:`posviz.train.log`),
  write a checksummed manifest after each checkpoint
  (:mod:`posviz.read.manifests`), and feed a progress display.

See ARCHITECTURE.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from posviz.train.log import evaluation_records, write_logs


def masked_accuracy(eval_pred) -> dict[str, float]:
    """Share of masked tokens predicted exactly (``compute_metrics`` for Trainer)."""

    preds, labels = eval_pred.predictions, eval_pred.label_ids
    keep = labels != -100
    return {"accuracy": float((preds[keep] == labels[keep]).mean()) if keep.any() else float("nan")}


def next_token_accuracy(eval_pred) -> dict[str, float]:
    """Share of next tokens predicted exactly: the prediction at ``i`` against the label at ``i + 1`` (causal LM)."""

    preds, labels = eval_pred.predictions[:, :-1], eval_pred.label_ids[:, 1:]
    keep = labels != -100
    return {"accuracy": float((preds[keep] == labels[keep]).mean()) if keep.any() else float("nan")}


def argmax_logits(logits, labels):
    """Keep only predicted ids during evaluation (never the full vocabulary logits)."""
    return logits.argmax(dim=-1)


def measure_positions(model, n: int | None = None) -> dict[str, Any]:
    """Toeplitzness of a live model's E_P (with null baseline) and of each layer-0 head.

    Parameters
    ----------
    model
        A ``PosvizForMaskedLM`` or ``PosvizForCausalLM``.
    n
        Positions scored (the first ``n``; ``None``: all).

    Returns
    -------
    dict
        The fields the training log records (see :mod:`posviz.train.log`); NaN
        is written as ``None``.
    """
    import warnings

    from posviz.models.position_terms import position_table, positional_scores
    from posviz.positional_scores import PosvizWarning
    from posviz.toeplitz.engine import score, score_embeddings

    out: dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PosvizWarning)  # zero variance at init is reported as NaN → null
        table = position_table(model)
        if table is not None:
            s = score_embeddings(table[:n] if n else table, null_draws=5, seed=0)
            out.update(toeplitzness_ep=s.toeplitzness, toeplitzness_ep_offdiag=s.toeplitzness_offdiag, null_ep=s.null_mean,
                       excess_ep=s.excess, null_ep_offdiag=s.null_mean_offdiag, excess_ep_offdiag=s.excess_offdiag)
        if model.config.position_scheme not in ("none", "rope"):  # RoPE adds no scores: its bands are `posviz heads`
            t = score(positional_scores(model, layer=0, n=n), null=False)
            out["toeplitzness_heads"] = [float(x) for x in t.toeplitzness]
            out["toeplitzness_heads_mean"] = float(t.toeplitzness.mean())
            out["toeplitzness_heads_offdiag_mean"] = float(t.toeplitzness_offdiag.mean())
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in out.items()}


def _trainer_callback_base():
    from transformers import TrainerCallback

    return TrainerCallback


def make_callbacks(run_dir: Path, run_info: dict[str, Any], on_update: Callable[[str, Any], None] | None = None) -> list:
    """The posviz callbacks: Toeplitzness logging, checkpoint manifests, progress.

    Parameters
    ----------
    run_dir
        The run folder (logs are written there).
    run_info
        The ``run`` part of ``trajectory.json`` (the contents of ``run.json``).
    on_update
        Progress display, called with ``("step", int)``, ``("loss", float)`` and
        ``("evaluate", record)``.
    """
    base = _trainer_callback_base()  # transformers is imported only when a run starts

    class ToeplitznessCallback(base):
        """Adds Toeplitzness to each evaluation's log entry and rewrites the run's logs.

        Every process measures (their weights are the same), so that every
        process's log history is complete; the main process writes the logs.
        """

        def on_evaluate(self, args, state, control, metrics=None, model=None, **kwargs):
            if model is None:
                return
            fields = measure_positions(model, n=model.config.max_position_embeddings)
            for entry in reversed(state.log_history):  # the entry Trainer.log just appended
                if "eval_loss" in entry and entry.get("step") == state.global_step:
                    entry.update(fields)
                    break
            if state.is_world_process_zero:
                write_logs(run_dir, evaluation_records(state.log_history), run_info)
            if on_update:
                on_update("evaluate", evaluation_records(state.log_history)[-1])

    class ManifestCallback(base):
        """Marks a checkpoint complete once Trainer has written all of it."""

        def on_save(self, args, state, control, **kwargs):
            from posviz.read.manifests import write_manifest
            from posviz.train.processes import barrier

            barrier(args)  # every process has written its rng_state_<rank>.pth into the checkpoint
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if state.is_world_process_zero and folder.is_dir():
                write_manifest(folder)

    class ProgressCallback(base):
        """Forwards steps and training losses to the progress display."""

        def on_step_end(self, args, state, control, **kwargs):
            if on_update:
                on_update("step", state.global_step)

        def on_log(self, args, state, control, logs=None, **kwargs):
            if on_update and logs and "loss" in logs:
                on_update("loss", logs["loss"])

    return [ToeplitznessCallback(), ManifestCallback(), ProgressCallback()]
