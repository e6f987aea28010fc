"""The fused Triton kernel of the tiled statistics against the PyTorch tiles, on the CPU in Triton's interpreter.

The kernel is GPU code; ``TRITON_INTERPRET=1`` runs the same kernel, program by program, with NumPy. The interpreter
must be chosen before Triton is imported, so the kernels run in a process of their own (tests/fused_kernel_runs.py).
The interpreter is lenient where the compiler is not, so the kernel is also compiled for a GPU (to PTX: no GPU needed).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from posviz.errors import OptionError
from posviz.observe.tiled.choice import KERNEL_ENV, choose_kernel, kernel_choice
from posviz.observe.tiled.fused import MIN_TRITON, accumulate_fused, triton_version, why_not_fused
from posviz.observe.tiled.kernel import AttentionInputs, accumulate
from posviz.observe.tiled.sums import TiledSums
from posviz.observe.tiled.support import Support
from tests.fused_kernel_runs import CASES, COMPILED, assert_same_sums, inputs

ROOT = Path(__file__).resolve().parents[2]
VERSION = triton_version()
needs_triton = pytest.mark.skipif(VERSION is None or VERSION < MIN_TRITON, reason=f"the fused kernel needs Triton 3.3 or later; found {triton_version()}")


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("fused") / "sums.npz"
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    env.pop(KERNEL_ENV, None)
    proc = subprocess.run([sys.executable, "-W", "ignore", str(ROOT / "tests" / "fused_kernel_runs.py"), "interpret", str(out)], env=env,
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(np.load(out))


@needs_triton
def test_the_kernel_compiles_for_a_gpu_in_every_configuration(tmp_path):
    """Triton's compiler, targeting sm_90 (H100/H200), in a process whose Triton cache and home are temporary."""
    env = {**os.environ, "TRITON_CACHE_DIR": str(tmp_path / "cache"), "TRITON_HOME": str(tmp_path), "TRITON_DEFAULT_FP_FUSION": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    env.pop("TRITON_INTERPRET", None)
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "fused_kernel_runs.py"), "compile"], env=env, capture_output=True,
                          text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    built = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [b["name"] for b in built] == list(COMPILED) and all(b["ptx_chars"] > 10_000 for b in built)


def _sums(saved: dict, name: str, side: str) -> TiledSums:
    fields = {k.split("/")[-1]: torch.from_numpy(v) for k, v in saved.items() if k.startswith(f"{name}/{side}/")}
    return TiledSums(**{**fields, "blocks": int(fields["blocks"])})


@needs_triton
@pytest.mark.parametrize("name", list(CASES))
def test_every_sum_of_the_fused_kernel_equals_the_pytorch_tiles(interpreted, name):
    torch_sums, fused = _sums(interpreted, name, "torch"), _sums(interpreted, name, "fused")
    n, calls, batch = CASES[name][0], CASES[name][-1], CASES[name][4]
    assert torch_sums.blocks == batch * calls
    assert_same_sums(fused, torch_sums, Support(n, *CASES[name][1:3]))


def test_the_fused_kernel_is_chosen_only_where_it_can_run(monkeypatch):
    q = torch.zeros(1, 2, 8, 16)
    plain = AttentionInputs(q, q, 0.25, Support(8, True))
    biased = AttentionInputs(q, q, 0.25, Support(8, True), bias=lambda *a: None)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.delenv(KERNEL_ENV, raising=False)
    assert why_not_fused(plain) == "its tensors are on cpu, not a CUDA device" and choose_kernel(plain) != "triton"
    assert why_not_fused(biased) == "its attention adds a positional term"
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert (choose_kernel(plain) == "triton") is (VERSION is not None and VERSION >= MIN_TRITON)
    if VERSION is not None and VERSION < MIN_TRITON:  # the oldest environment: PyPI's torch 2.2 pins Triton 2.2
        assert why_not_fused(plain) == f"Triton {VERSION[0]}.{VERSION[1]} is older than 3.3"
    assert choose_kernel(plain, "torch") == "torch" and choose_kernel(biased) == "torch"
    monkeypatch.delenv("TRITON_INTERPRET")
    with pytest.raises(OptionError, match="POSVIZ_TILED_KERNEL=triton: the fused kernel cannot run here: its tensors are on cpu"):
        choose_kernel(plain, "triton")
    monkeypatch.setenv(KERNEL_ENV, "cuda")
    with pytest.raises(OptionError, match="'cuda' is not a tiled kernel"):
        kernel_choice()


@needs_triton
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the compiled kernel runs on a GPU (the interpreted one above runs here)")
@pytest.mark.parametrize("name", list(CASES))
def test_on_a_gpu_the_compiled_kernel_equals_the_pytorch_tiles(name, monkeypatch):
    n, causal, window, cap, batch, heads, kv, d, map_size, dtype, calls = CASES[name]
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setenv(KERNEL_ENV, "torch")
    fused = unfused = None
    for call in range(calls):
        x = inputs(n, causal, window, cap, batch, heads, kv, d, dtype, seed=n + call)
        x = AttentionInputs(x.query.cuda(), x.key.cuda(), x.scale, x.support, softcap=x.softcap)
        unfused = accumulate(x, unfused, map_size=map_size, tile=32)
        fused = accumulate_fused(x, fused, map_size=map_size, block=16)
    for field, value in fused.numpy().items():
        if field.startswith("span"):
            assert np.abs(value - unfused.numpy()[field]).sum() <= 4, field
        elif field != "blocks":
            np.testing.assert_allclose(value, unfused.numpy()[field], rtol=1e-5, atol=1e-5, err_msg=field)
