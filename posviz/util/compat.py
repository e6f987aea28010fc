"""The differences between the library versions posviz supports, in one place.

posviz declares ``transformers>=4.44`` and ``huggingface_hub>=0.24`` and CI runs
the whole suite on the oldest and on the newest pair (README, "Development").
Where an API moved or appeared between them, the rest of posviz asks here
instead of testing versions itself; each shim names the change it papers over.
Heavy libraries are imported inside the functions, so importing this module
costs nothing.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
from types import ModuleType
from typing import Any


def hub_errors() -> ModuleType:
    """The module that defines huggingface_hub's errors (``GatedRepoError``, ``RepositoryNotFoundError``, ...).

    ``huggingface_hub.errors`` holds them all from 0.25 on; 0.24 has that module
    but keeps the HTTP errors in ``huggingface_hub.utils`` (which newer
    releases still re-export).
    """
    from huggingface_hub import errors

    if hasattr(errors, "RepositoryNotFoundError"):
        return errors
    from huggingface_hub import utils

    return utils


class _TorchInit:
    """transformers 4.x: ``torch.nn.init``, looked up at call time, plus the ``copy_`` that transformers 5 added.

    At call time, because transformers 4 swaps torch's initialisers for no-ops
    while ``from_pretrained`` builds a model (its ``no_init_weights``).
    """

    def __getattr__(self, name: str) -> Any:
        import torch

        return getattr(torch.nn.init, name)

    @staticmethod
    def copy_(tensor: Any, other: Any) -> Any:
        import torch

        with torch.no_grad():
            return tensor.copy_(other)


def weight_init() -> Any:
    """The initialisers a model's ``_init_weights`` should call (``normal_``, ``zeros_``, ``ones_``, ``copy_``, ...).

    transformers 5's ``transformers.initialization``, whose functions skip tensors
    already loaded from a checkpoint; on transformers 4, ``torch.nn.init`` with a
    ``copy_`` (there ``from_pretrained`` only initialises modules with missing weights).
    """
    try:
        from transformers import initialization
    except ImportError:  # transformers 4.x
        return _TorchInit()
    return initialization


def trainer_tokenizer_kwargs(tokenizer: Any) -> dict[str, Any]:
    """``Trainer(...)``'s keyword for the tokenizer: ``processing_class`` from transformers 4.46, ``tokenizer`` before."""
    from transformers import Trainer

    name = "processing_class" if "processing_class" in inspect.signature(Trainer.__init__).parameters else "tokenizer"
    return {name: tokenizer}


def trainer_resume_context() -> contextlib.AbstractContextManager:
    """Lets ``Trainer`` reload the numpy RNG state of a checkpoint under torch >= 2.6.

    torch 2.6 made ``torch.load`` default to ``weights_only=True``, which refuses
    the numpy arrays in ``rng_state.pth``. transformers releases from late 2024 on
    allowlist them (``trainer_pt_utils.safe_globals``); for older ones this
    allowlists the same numpy types around ``trainer.train(resume_from_checkpoint=...)``.
    """
    import torch
    from transformers import trainer_pt_utils

    if hasattr(trainer_pt_utils, "safe_globals") or not hasattr(torch.serialization, "safe_globals"):
        return contextlib.nullcontext()
    import numpy as np

    core = np._core if hasattr(np, "_core") else np.core  # numpy 2 renamed numpy.core
    return torch.serialization.safe_globals([core.multiarray._reconstruct, np.ndarray, np.dtype, type(np.dtype(np.uint32))])


def pin_mixed_precision(bf16: bool, fp16: bool) -> None:
    """State this run's precision in ``ACCELERATE_MIXED_PRECISION`` before ``TrainingArguments`` is built.

    transformers 4.x's ``TrainingArguments`` writes ``bf16``/``fp16`` there and
    reads it back as the default of the next one, so a bf16 run would make a
    later fp32 run of the same process train under bf16 autocast. posviz's
    ``--precision`` decides, so the variable is set from it on every version.
    """
    os.environ["ACCELERATE_MIXED_PRECISION"] = "bf16" if bf16 else "fp16" if fp16 else "no"


def rfft_into(block: Any, length: int, out: Any) -> Any:
    """``np.fft.rfft(block, n=length, axis=1)`` written into ``out`` (numpy >= 2 writes in place, older copies once).

    numpy 2.0 added ``out=`` to its FFTs; with numpy 1.x (the supported lower bound is
    1.24) the result is computed into a temporary and copied, the same numbers.
    """
    import numpy as np

    if _rfft_takes_out():
        return np.fft.rfft(block, n=length, axis=1, out=out)
    out[...] = np.fft.rfft(block, n=length, axis=1)
    return out


@functools.cache
def _rfft_takes_out() -> bool:
    import numpy as np

    return "out" in inspect.signature(np.fft.rfft).parameters
