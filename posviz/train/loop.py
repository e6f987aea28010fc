"""``posviz train``'s run, top to bottom: run folder, data, model, Trainer, training, summary.

:func:`train` reads as the steps of a run; each step lives in the module named
after it (:mod:`~posviz.train.run_folder`, :mod:`~posviz.train.data`,
:mod:`~posviz.train.options`, :mod:`~posviz.train.collate`,
:mod:`~posviz.train.callbacks`, :mod:`~posviz.train.result`). See ARCHITECTURE.md.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from posviz.errors import PosvizError
from posviz.train.options import TrainOptions
from posviz.train.result import TrainResult, finished_run


def _quiet_transformers() -> None:
    """No transformers logging or progress bars: posviz shows its own progress."""
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def train(options: TrainOptions, *, resume: bool = False, on_update: Callable[[str, Any], None] | None = None) -> TrainResult:
    """Train a posviz model on a corpus and record its Toeplitzness trajectory.

    Parameters
    ----------
    options
        What to train (see :class:`~posviz.train.options.TrainOptions`).
    resume
        Continue the run in ``options.out`` from its newest complete checkpoint
        (same weights, optimizer, scheduler and RNG states as an uninterrupted run).
    on_update
        Called with ``("setup", dict)``, ``("step", int)``, ``("loss", float)`` and
        ``("evaluate", record)`` for progress displays (in the main process only).

    Returns
    -------
    TrainResult
        Final checkpoint, evaluation records and timing. Under ``torchrun`` every
        process returns one; the main process wrote the run folder
        (:mod:`~posviz.train.processes`).
    """
    import transformers
    from transformers import Trainer
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    from posviz.models import PosvizForCausalLM, PosvizForMaskedLM
    from posviz.read.manifests import checkpoint_step
    from posviz.train import run_folder as folder
    from posviz.train.callbacks import argmax_logits, make_callbacks, masked_accuracy, next_token_accuracy
    from posviz.train.collate import CausalCollator, MlmCollator
    from posviz.train.data import prepare_run_data
    from posviz.train.options import model_config, precision_flags, training_arguments
    from posviz.train.processes import checked_alike, decided_by_main, main_first
    from posviz.util.compat import trainer_resume_context, trainer_tokenizer_kwargs

    _quiet_transformers()
    with checked_alike():  # every process checks alike, before they meet
        flags, device = precision_flags(options.precision)
    args = training_arguments(options, flags)  # under torchrun: one of several processes (train.processes)
    main = args.process_index == 0
    on_update = on_update if main else None  # one progress display, the main process's
    # -- the run folder: checks, and the checkpoint to resume from (the main process decides) --
    checkpoint = decided_by_main(args, lambda: folder.check_run_folder(options, resume))
    args.eval_on_start = checkpoint is None  # a resumed run has its step-0 evaluation in its log
    start_step = checkpoint_step(checkpoint) if checkpoint else 0

    # -- data (the main process first: it writes run.json and the tokenizer the others read) --
    prepare = prepare_run_data
    if options.task is not None:  # an algorithmic task instead of text
        from posviz.train.task_data import prepare_task_data as prepare
    data = main_first(args, lambda: prepare(options, resume=resume, main=main, world_size=args.world_size))
    tokenizer, train_set, eval_set, run_info = data

    # -- model --
    config = model_config(options, tokenizer)
    transformers.set_seed(options.seed)
    causal = options.objective == "causal"
    model = (PosvizForCausalLM if causal else PosvizForMaskedLM)(config)
    parameters = sum(p.numel() for p in model.parameters())
    if on_update:
        on_update("setup", {"parameters": parameters, "train_blocks": len(train_set), "eval_blocks": len(eval_set),
                            "device": device, "resumed_from": checkpoint, "steps": options.steps, "start": start_step})

    # -- Trainer --
    if options.task is not None:  # answer-only loss on padded examples; accuracy and exact match on the answer
        from posviz.train.task_data import TaskCollator, task_metrics

        collator, metrics = TaskCollator(tokenizer.pad_token_id), task_metrics
    else:
        collator = CausalCollator(tokenizer) if causal else MlmCollator(tokenizer, options.seed)
        metrics = next_token_accuracy if causal else masked_accuracy
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=train_set,
        eval_dataset=eval_set,
        data_collator=collator,
        **trainer_tokenizer_kwargs(tokenizer),
        compute_metrics=metrics,
        preprocess_logits_for_metrics=argmax_logits,
        callbacks=make_callbacks(options.out, run_info, on_update),
    )
    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)

    # -- train --
    start = time.perf_counter()
    try:
        with trainer_resume_context():
            trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    except OSError as e:
        if e.errno not in folder.WRITE_ERRNOS:
            raise
        raise PosvizError(folder.write_failure(options.out, e, trainer.state.global_step)) from None
    seconds = time.perf_counter() - start

    # -- summary --
    return finished_run(options, trainer, data, checkpoint=checkpoint, seconds=seconds, parameters=parameters, device=device)
