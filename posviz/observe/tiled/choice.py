"""Which implementation computes a layer's tiled statistics: the Triton kernel, the compiled C loop or the PyTorch tiles.

All three compute the same sums (:class:`~posviz.observe.tiled.sums.TiledSums`). The two fused kernels take attention
with no additive term only (RoPE and learned absolute positions); ALiBi, T5 buckets, TISA and TUPE take the PyTorch
tiles of :mod:`~posviz.observe.tiled.kernel`.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

from posviz.errors import OptionError

#: ``auto``: where the attention has no additive term, the fused Triton kernel (:mod:`~posviz.observe.tiled.fused`) on a
#: CUDA device where Triton is installed, and the compiled CPU kernel (:mod:`~posviz.observe.tiled.native`) on the CPU
#: where a C compiler works; else the PyTorch tiles. ``torch``: always the PyTorch tiles; ``triton``: the fused kernel
#: or an error; ``native``: the CPU kernel or an error. Set by ``POSVIZ_TILED_KERNEL``.
KERNEL_ENV = "POSVIZ_TILED_KERNEL"
KERNELS = ("auto", "torch", "triton", "native")


def kernel_choice(kernel: str | None = None) -> str:
    """``kernel``, else ``$POSVIZ_TILED_KERNEL``, else ``auto``; refuses anything but :data:`KERNELS`."""
    kernel = kernel or os.environ.get(KERNEL_ENV) or "auto"
    if kernel not in KERNELS:
        raise OptionError(f"{KERNEL_ENV}={kernel!r} is not a tiled kernel", "use auto, torch, triton or native")
    return kernel


def choose_kernel(inputs: Any, kernel: str | None = None) -> str:
    """The implementation that computes ``inputs``: ``triton``, ``native`` or ``torch``.

    Parameters
    ----------
    inputs
        One layer's :class:`~posviz.observe.tiled.kernel.AttentionInputs`.
    kernel
        One of :data:`KERNELS` (None: ``$POSVIZ_TILED_KERNEL``, else ``auto``).

    Returns
    -------
    str
        ``triton`` or ``native`` where that kernel can run and is allowed, else ``torch``. Under ``auto``, a CPU
        layer with no additive term whose C kernel cannot be had (no compiler) warns why before the PyTorch tiles.

    Raises
    ------
    OptionError
        An unknown kernel, or ``triton`` or ``native`` asked for where that kernel cannot run.
    """
    from posviz.observe.tiled.fused import why_not_fused
    from posviz.observe.tiled.native import why_not_native

    choice = kernel_choice(kernel)
    for name, why_not, what in (("triton", why_not_fused, "the fused kernel"), ("native", why_not_native, "the compiled CPU kernel")):
        if choice not in ("auto", name):
            continue
        why = why_not(inputs)
        if why is None:
            return name
        if choice == name:
            raise OptionError(f"{KERNEL_ENV}={name}: {what} cannot run here: {why}", f"unset {KERNEL_ENV} (auto)")
        if name == "native" and inputs.bias is None and inputs.query.device.type == "cpu":
            warnings.warn(f"the compiled CPU kernel of the attention statistics cannot be had ({why}): the PyTorch "
                          "tiles, several times slower, compute them", UserWarning, stacklevel=3)
    return "torch"
