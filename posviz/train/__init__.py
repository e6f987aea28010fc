"""Masked-LM training of posviz models with Toeplitzness tracking (``posviz train``).

The pieces are transformers' own: ``Trainer`` (so ``torchrun`` / ``accelerate
launch`` and mixed precision work unchanged) and
``DataCollatorForLanguageModeling`` (15% masking, 80/10/10). posviz adds the
data, the callbacks that measure Toeplitzness at each evaluation, checkpoint
manifests for a safe ``--resume``, and the run's log. Modules, in the order of
a run (see ARCHITECTURE.md):

* :mod:`~posviz.train.options`: :class:`TrainOptions`, learning rates, precision,
  ``TrainingArguments`` and model configuration;
* :mod:`~posviz.train.run_folder`: checks before a run, ``run.json``, the tokenizer folder;
* :mod:`~posviz.train.corpus`, :mod:`~posviz.train.tokenizer`, :mod:`~posviz.train.data`:
  corpus → tokenizer → fixed-length blocks → training and held-out sets;
* :mod:`~posviz.train.collate`: the blocks dataset and the seeded MLM collator;
* :mod:`~posviz.train.callbacks`: masked accuracy, Toeplitzness, logs, manifests, progress;
* :mod:`~posviz.train.processes`: several processes under ``torchrun`` (the main
  process decides and writes, the others wait for it);
* :mod:`~posviz.train.loop`: :func:`train`, the run top to bottom;
* :mod:`~posviz.train.result`: :class:`TrainResult` and the summary;
* :mod:`~posviz.train.log`: ``trajectory.json``/``.csv`` (no torch: plots read runs cheaply);
* :mod:`~posviz.train.resume`: choosing where to resume (the newest complete checkpoint;
  manifests and their checks are in :mod:`posviz.read.manifests`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from posviz.util.lazy import lazy_exports

if TYPE_CHECKING:
    from posviz.train.loop import train
    from posviz.train.options import TrainOptions
    from posviz.train.result import TrainResult

__all__ = ["TrainOptions", "TrainResult", "train"]

# Lazy: `import posviz.train` stays cheap; torch and transformers load with a run.
__getattr__, __dir__ = lazy_exports(__name__, {"train": "posviz.train.loop", "TrainOptions": "posviz.train.options", "TrainResult": "posviz.train.result"})
