"""``posviz attention``'s default tiled path on real tiny models: equal to ``--exact-maps``, bounded memory, bad input.

The tiled path needs transformers' AttentionInterface (transformers 5); under an older transformers every model takes
the eager path (without a warning: nothing changed there), which the last tests check instead.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from posviz.cli.app import app
from posviz.errors import OptionError
from posviz.observe.attention import attention
from posviz.observe.tiled.choice import KERNEL_ENV
from posviz.observe.tiled.fused import MIN_TRITON, triton_version
from posviz.observe.tiled.native import native_library
from posviz.observe.tiled.run import can_capture
from tests.checkpoint_factory import save_tiny_model as _save

pytestmark = pytest.mark.usefixtures("one_thread")
TILED = can_capture() is None
needs_interface = pytest.mark.skipif(not TILED, reason=f"no attention interface in this transformers: {can_capture()}")
SAME = ("toeplitzness", "toeplitzness_offdiag", "null_mean", "null_mean_offdiag", "positional_share", "positional_share_null",
        "sink_mass", "profile_at_peak")


@pytest.fixture(scope="module")
def llama(tmp_path_factory, tokenizer) -> Path:
    """A tiny RoPE LLaMA with grouped-query attention and linear RoPE scaling, and a word-level tokenizer."""
    return _save("llama", tmp_path_factory.mktemp("llama"), tokenizer=tokenizer, vocab_size=len(tokenizer), num_key_value_heads=2,
                 max_position_embeddings=8192, rope_scaling={"rope_type": "linear", "factor": 2.0})


def _json(args: list[str]) -> list[dict]:
    r = CliRunner().invoke(app, ["attention", *args, "--format", "json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


@needs_interface
def test_the_tiled_default_equals_the_exact_maps_to_1e_5(llama, corpus):
    common = [str(llama), "--corpus", str(corpus), "--seq-len", "512", "--max-blocks", "2", "--layers", "all", "--batch-size", "1"]
    tiled, exact = _json(common), _json([*common, "--exact-maps"])
    assert len(tiled) == len(exact) == 8
    for t, e in zip(tiled, exact, strict=True):
        assert (t["layer"], t["head"], t["profile_peak"]) == (e["layer"], e["head"], e["profile_peak"])
        for name in SAME:
            assert t[name] == pytest.approx(e[name], abs=1e-5), name
        assert "span90" not in e and t["map_exact"] is True and t["sink_rate_eps"] == 0.3
        assert 0 <= t["span50"] <= t["span90"] <= 511 and len(t["received_by_position"]) == 256
        assert sum(t["distance_mass"]) == pytest.approx(1.0)


@needs_interface
def test_the_tiled_path_keeps_memory_bounded_where_eager_maps_would_not(llama, tmp_path):
    """4096 positions: eager maps would add one layer's maps (4 x 4096² x 4 B = 268 MB) and a float64 sum per layer
    (537 MB each); the tiled path adds a few tiles and O(n) sums. Measured as the growth of the child's peak RSS
    (VmHWM, its own address space's high-water mark) over its peak once torch, the model and the blocks are loaded,
    so the torch build (CPU or CUDA) does not count. Not ru_maxrss: Linux keeps that across execve, so a child of a
    large test worker would start at the worker's peak and could not show any growth."""
    if not Path("/proc/self/status").is_file():
        pytest.skip("needs Linux's /proc/self/status (VmHWM)")
    script = (
        "import re, numpy as np, torch, posviz; from posviz.observe.loading import load_model\n"
        "def peak():\n"
        "    return int(re.search(r'VmHWM:\\s+(\\d+) kB', open('/proc/self/status').read()).group(1))\n"
        f"load_model({str(llama)!r}, with_tokenizer=False, attn_implementation=None); torch.ones(1) @ torch.ones(1)\n"
        "ids = np.random.default_rng(0).integers(1, 60, (1, 4096)); before = peak()\n"
        f"r = posviz.attention({str(llama)!r}, token_blocks=ids, batch_size=1)\n"
        "print(r.method, r.means[0].shape[-1], before, peak())"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=tmp_path).stdout.split()
    method, side, before_kb, after_kb = out[0], int(out[1]), int(out[2]), int(out[3])
    assert method == "tiled" and side == 512
    assert after_kb - before_kb < 250_000, f"the peak grew by {(after_kb - before_kb) / 1e3:.0f} MB"


@needs_interface
def test_beyond_the_map_size_the_conventions_say_so_and_the_figure_spans_every_position(llama, corpus, tmp_path):
    r = attention(str(llama), corpus=str(corpus), seq_len=96, max_blocks=2, map_size=32, layers="1")
    assert r.tiled and r.means[1].shape == (4, 32, 32) and not r.stats[1].map_exact
    assert "on the 32 x 32 block-averaged mean map" in r.conventions
    from posviz.plots.attention import plot_attention_layer

    fig = plot_attention_layer(r, 1)
    assert "96 positions" in fig.get_suptitle()


@pytest.mark.parametrize(("option", "value", "says"), [("--tile", "0", "--tile"), ("--map-size", "1", "--map-size"),
                                                         ("--sink-eps", "1.5", "--sink-eps")])
def test_bad_tiling_options_exit_2(llama, corpus, tmp_path, option, value, says):
    out = tmp_path / "r.json"
    r = CliRunner().invoke(app, ["attention", str(llama), "--corpus", str(corpus), option, value, "-o", str(out)])
    assert r.exit_code == 2 and says in r.output and not out.exists()


@pytest.mark.parametrize("kwargs", [{"tile": 0}, {"tile": 2.5}, {"map_size": 1}, {"sink_eps": -0.1}])
def test_the_python_api_refuses_bad_tiling_before_loading(kwargs):
    with pytest.raises(OptionError):
        attention("no/such-model", **kwargs)


def test_an_architecture_outside_the_interface_warns_once_and_runs_eager(tmp_path, corpus, tokenizer):
    bloom = _save("bloom", tmp_path / "bloom", tokenizer=tokenizer, vocab_size=len(tokenizer))
    r = CliRunner().invoke(app, ["attention", str(bloom), "--corpus", str(corpus), "--seq-len", "16", "--max-blocks", "2",
                                 "--format", "json"])
    assert r.exit_code == 0, r.output
    warnings = [line for line in r.stderr.splitlines() if line.startswith("warning:")]
    if TILED:
        assert len(warnings) == 1 and "BloomModel" in warnings[0] and "falling back to eager attention maps" in warnings[0]
    else:  # an older transformers: eager for every model, as before the tiled path, without a warning
        assert warnings == []
    assert "span90" not in json.loads(r.stdout)[0]


def test_a_length_eager_maps_cannot_hold_exits_2_naming_the_architecture(tmp_path):
    bloom = _save("bloom", tmp_path / "bloom")
    ids = np.ones((1, 400_000), dtype=np.int64)  # ALiBi has no table: only memory stops it
    with pytest.raises(OptionError, match=r"BloomModel .*eager attention maps of 400000 positions need about \d+ GiB, more "
                       r"than this machine's \d+ GiB; its attention inputs cannot be captured \("):
        attention(str(bloom), token_blocks=ids, batch_size=1)


def _records_through(kernel: str, llama: Path, corpus: Path, out: Path, seq_len: int, warnings: str = "error::UserWarning",
                     **env: str) -> list[dict]:
    """``posviz attention`` as a process with ``POSVIZ_TILED_KERNEL=kernel``: its JSON records (one layer, 2 blocks)."""
    proc = subprocess.run([sys.executable, "-W", warnings, "-m", "posviz", "attention", str(llama), "--corpus",
                           str(corpus), "--seq-len", str(seq_len), "--max-blocks", "2", "--layers", "1", "--format", "json", "-o",
                           str(out)], env={**os.environ, KERNEL_ENV: kernel, "OMP_NUM_THREADS": "1", **env}, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(out.read_text())


def _assert_same_records(a: list[dict], b: list[dict], span_tolerance: float) -> None:
    """Two code paths, not one (float32 sums in another order differ in their last digits), with the same records
    to 1e-5 (a span is a mean over queries: one moved query moves it by 1 / queries)."""
    assert len(a) == len(b) == 4
    assert any(x["entropy"] != y["entropy"] for x, y in zip(a, b, strict=True))
    for x, y in zip(a, b, strict=True):
        assert (x["layer"], x["head"], x["profile_peak"]) == (y["layer"], y["head"], y["profile_peak"])
        for name in (*SAME, "entropy", "max_weight"):
            assert x[name] == pytest.approx(y[name], abs=1e-5), name
        for name in ("span50", "span90"):
            assert x[name] == pytest.approx(y[name], abs=span_tolerance), name
        assert x["received_by_position"] == pytest.approx(y["received_by_position"], abs=1e-5)


@needs_interface
@pytest.mark.skipif(triton_version() is None or triton_version() < MIN_TRITON, reason=f"the fused kernel needs Triton 3.3 or later; found {triton_version()}")
def test_the_fused_kernel_gives_the_command_the_numbers_of_the_pytorch_tiles(llama, corpus, tmp_path):
    """``posviz attention`` as a process, once through the fused Triton kernel (in Triton's interpreter, as a GPU would
    run it) and once through the PyTorch tiles."""
    fused, tiles = (_records_through(k, llama, corpus, tmp_path / f"{k}.json", 80, "ignore", TRITON_INTERPRET="1") for k in ("triton", "torch"))
    _assert_same_records(fused, tiles, span_tolerance=1e-5)


@needs_interface
@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc): the compiled CPU kernel cannot be built here")
def test_the_compiled_cpu_kernel_gives_the_command_the_numbers_of_the_pytorch_tiles(llama, corpus, tmp_path):
    """``posviz attention`` as a process, through the compiled CPU kernel (the default on a CPU: no fallback warning)
    and through the PyTorch tiles, past one key chunk of the kernel (256)."""
    compiled, tiles = (_records_through(k, llama, corpus, tmp_path / f"{k}.json", 300) for k in ("auto", "torch"))
    _assert_same_records(compiled, tiles, span_tolerance=0.02)


@pytest.mark.parametrize(("value", "says"), [("cuda", "POSVIZ_TILED_KERNEL='cuda' is not a tiled kernel"),
                                             ("triton", "POSVIZ_TILED_KERNEL=triton: the fused kernel cannot run here"),
                                             ("native", "POSVIZ_TILED_KERNEL=native: the compiled CPU kernel cannot run here: no C "
                                                        "compiler (no-such-compiler-posviz) on PATH")])
def test_a_tiled_kernel_that_cannot_be_had_exits_2(llama, corpus, tmp_path, monkeypatch, value, says):
    monkeypatch.setenv(KERNEL_ENV, value)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setenv("CC", "no-such-compiler-posviz")
    native_library.cache_clear()
    out = tmp_path / "r.json"
    try:
        r = CliRunner().invoke(app, ["attention", str(llama), "--corpus", str(corpus), "--seq-len", "16", "--max-blocks", "1",
                                     "-o", str(out)])
    finally:
        native_library.cache_clear()  # the next test compiles with the machine's compiler
    if value in ("triton", "native") and not TILED:  # an older transformers runs eager maps: no tiles, no kernel to choose
        assert r.exit_code == 0, r.output
        return
    assert r.exit_code == 2 and says in r.output and "Traceback" not in r.output and not out.exists(), r.output
