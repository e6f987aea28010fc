"""The compiled CPU kernel of the tiled statistics (posviz.observe.tiled.native) against the PyTorch tiles and a dense
float64 reference, and the choice of kernel where no compiler works.

The kernel is compiled with the machine's C compiler into the test's own posviz cache (conftest isolates it). A
machine without one skips the comparisons (they would test nothing) but not the fallback tests.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import stat
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from posviz.errors import OptionError
from posviz.observe.tiled import native
from posviz.observe.tiled.choice import KERNEL_ENV, choose_kernel
from posviz.observe.tiled.kernel import AttentionInputs, accumulate
from posviz.observe.tiled.native import accumulate_native, native_library, why_not_native
from posviz.observe.tiled.support import Support
from tests.fused_kernel_runs import CASES, assert_same_sums, inputs

pytestmark = pytest.mark.usefixtures("one_thread")
needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc): the compiled kernel cannot be built here")
#: Beside the fused kernel's cases: several key chunks (512 keys at d = 16, 64 at d = 128) and query tiles (32), a head
#: size that is no multiple of eight, distances past the exact bins, rows of the pooled map that span several query
#: tiles (and tiles that span several rows), and sums over two calls.
LONG = {
    "causal-long-pooled": (700, True, None, None, 2, 4, 2, 20, 128, torch.float32, 2),
    "bidirectional-window-long": (600, False, 100, 3.0, 1, 2, 1, 16, 512, torch.float32, 1),
    "causal-window-exact-map": (300, True, 50, None, 1, 3, 3, 64, 512, torch.float32, 1),
    "causal-coarse-map": (1100, True, None, None, 1, 2, 1, 16, 16, torch.float32, 1),
    "bidirectional-wide-heads": (301, False, None, None, 1, 2, 2, 128, 64, torch.float32, 1),
}


@pytest.fixture
def fresh_library():
    """The compiled library looked up again in this test, and forgotten after it (another test's compiler may differ)."""
    native_library.cache_clear()
    yield
    native_library.cache_clear()


def _both(name: str, spec: tuple, monkeypatch) -> tuple:
    n, causal, window, cap, batch, heads, kv, d, map_size, dtype, calls = spec
    monkeypatch.setenv(KERNEL_ENV, "torch")
    compiled = tiles = None
    for call in range(calls):
        x = inputs(n, causal, window, cap, batch, heads, kv, d, dtype, seed=n + call)
        assert why_not_native(x) is None
        tiles = accumulate(x, tiles, map_size=map_size, tile=32)
        compiled = accumulate_native(x, compiled, map_size=map_size)
    return compiled, tiles, Support(n, causal, window)


@needs_cc
@pytest.mark.parametrize("name", [*CASES, *LONG])
def test_every_sum_of_the_compiled_kernel_equals_the_pytorch_tiles(name, monkeypatch):
    spec = {**CASES, **LONG}[name]
    compiled, tiles, support = _both(name, spec, monkeypatch)
    assert tiles.blocks == spec[4] * spec[-1]
    assert_same_sums(compiled, tiles, support)


def _dense_logits(x) -> torch.Tensor:
    """The logits of ``x`` in float64, capped, with -inf outside the support: (batch, heads, n, n)."""
    heads, kv = x.query.shape[1], x.key.shape[1]
    s = x.query.double() @ x.key.repeat_interleave(heads // kv, dim=1).double().transpose(-1, -2) * x.scale
    if x.softcap is not None:
        s = torch.tanh(s / x.softcap) * x.softcap
    return s.masked_fill(~torch.as_tensor(x.support.dense()), float("-inf"))


def with_normalisers(x):
    """``x`` with each query's log-sum-exp from its float64 logits, rounded to float32 (what the model's attention hands
    the one-pass kernel)."""
    return dataclasses.replace(x, lse=torch.logsumexp(_dense_logits(x), -1).float())


@needs_cc
@pytest.mark.parametrize("name", [*CASES, *LONG])
def test_the_one_pass_with_the_normalisers_given_equals_the_pytorch_tiles(name, monkeypatch):
    n, causal, window, cap, batch, heads, kv, d, map_size, dtype, calls = {**CASES, **LONG}[name]
    monkeypatch.setenv(KERNEL_ENV, "torch")
    one = tiles = None
    for call in range(calls):
        x = inputs(n, causal, window, cap, batch, heads, kv, d, dtype, seed=n + call)
        tiles = accumulate(x, tiles, map_size=map_size, tile=32)
        one = accumulate_native(with_normalisers(x), one, map_size=map_size)
    assert_same_sums(one, tiles, Support(n, causal, window))


@needs_cc
@pytest.mark.parametrize("given", [False, True], ids=["two-pass", "one-pass"])
@pytest.mark.parametrize(("causal", "window", "cap"), [(True, None, None), (False, None, 4.0), (True, 40, None), (False, 25, None)])
def test_the_compiled_kernel_gives_the_sums_of_the_dense_float64_maps(causal, window, cap, given):
    """An independent reference: every map formed in float64 and summed the way each field is defined."""
    n, heads, kv = 300, 4, 2
    x = inputs(n, causal, window, cap, 2, heads, kv, 16, torch.float32, seed=7)
    sums = accumulate_native(with_normalisers(x) if given else x, map_size=512).numpy()
    a = torch.softmax(_dense_logits(x), dim=-1).numpy()  # (2, H, n, n)
    offsets = np.stack([[np.trace(a[:, h].sum(0), offset=k) for k in range(-(n - 1), n)] for h in range(heads)])
    entropy = -(a * np.log(np.where(a > 0, a, 1.0))).sum(-1).sum(0)
    expected = {"row_mass": a.sum(-1).sum(0), "row_sq": (a * a).sum(-1).sum(0), "received": a.sum(2).sum(0),
                "offsets": offsets, "entropy": entropy, "max_weight": a.max(-1).sum(0), "sink": a[:, :, 1:, 0].sum((0, 2)),
                "map": a.sum(0)}
    for field, value in expected.items():
        np.testing.assert_allclose(sums[field], value, atol=2e-5, rtol=1e-5, err_msg=field)


@needs_cc
def test_the_entropy_of_peaked_rows_with_large_logits_keeps_its_digits(monkeypatch):
    """Logits up to about 110 and rows that put nearly all their weight on one key (attention sinks look like this):
    an entropy formed as lse * mass - sum a s cancels two numbers near 100 (errors near 8e-6 here); both kernels sum
    a (lse - s) instead, terms >= 0, and stay within the float32 logits' own rounding of the float64 entropy."""
    n, heads, d = 300, 4, 16
    g = torch.Generator().manual_seed(0)
    q, k = 4 * torch.randn(1, heads, n, d, generator=g), 4 * torch.randn(1, heads, n, d, generator=g)
    x = AttentionInputs(q, k, d**-0.5, Support(n, True, None))
    s = q.double() @ k.double().transpose(-1, -2) * d**-0.5
    a = torch.softmax(s.masked_fill(~torch.as_tensor(x.support.dense()), float("-inf")), dim=-1)[0]
    expected = -(a * torch.log(torch.where(a > 0, a, 1.0))).sum(-1).numpy()
    assert float(s.abs().max()) > 100 and (expected < 0.01).mean() > 0.25  # large logits, many peaked rows
    monkeypatch.setenv(KERNEL_ENV, "torch")
    for sums in (accumulate_native(x), accumulate_native(with_normalisers(x)), accumulate(x, tile=32)):
        np.testing.assert_allclose(sums.entropy.numpy(), expected, atol=5e-6, rtol=0)


@needs_cc
@pytest.mark.parametrize(("off", "redone"), [(0.0, False), (3e-7, False), (1e-3, True), (-1e-3, True)])
def test_normalisers_a_little_off_the_kernels_own_logits_give_the_sums_of_the_two_passes(off, redone):
    """The model's log-sum-exp comes from its own float32 logits, which round differently from the kernel's (at logits
    near 500 by the float spacing, 3e-5): its weights then sum to 1 + delta. Within 4e-6 the one pass keeps them
    (every sum within that of the two passes, which normalise by the kernel's own logits) and reports the entropy
    and the largest weight of the row renormalised; beyond, it sums the tile again with each row's weights divided
    by their sum, and every sum is the two passes' within float rounding (the correction is a float)."""
    x = inputs(200, True, None, None, 1, 2, 1, 16, torch.float32, seed=3)
    exact = with_normalisers(x)
    two = accumulate_native(x).numpy()
    one = accumulate_native(dataclasses.replace(exact, lse=exact.lse + off)).numpy()
    for field in ("offsets", "row_mass", "row_sq", "row_sum_sq", "received", "sink", "map"):
        np.testing.assert_allclose(one[field], two[field], rtol=2e-6 if redone else 1e-5, atol=1e-6, err_msg=field)
    for field in ("entropy", "max_weight"):  # renormalised either way
        np.testing.assert_allclose(one[field], two[field], rtol=0, atol=2e-6, err_msg=field)
    assert abs(one["span50"] - two["span50"]).sum() <= 2 and abs(one["span90"] - two["span90"]).sum() <= 2


@needs_cc
def test_normalisers_of_another_shape_are_refused():
    x = inputs(20, True, None, None, 1, 2, 1, 8, torch.float32, seed=0)
    with pytest.raises(ValueError, match="normalisers of shape"):
        dataclasses.replace(x, lse=torch.zeros(1, 2, 19))


def _pool_threads() -> set[int]:
    import threading

    return {t.ident for t in threading.enumerate() if t.name.startswith("posviz-tiled")}


def _sums_in_child(x, openmp, queue) -> None:
    torch.set_num_threads(1)  # PyTorch's own parallel operations wait for ever in a child of a parent that ran one
    queue.put(accumulate_native(x, threads=2, openmp=openmp).numpy()["entropy"])


def _in_forked_child(x, openmp: bool | None):
    """The entropy sums of ``x`` on two threads in a child forked now (None where this platform cannot fork)."""
    import multiprocessing

    if "fork" not in multiprocessing.get_all_start_methods():
        return None
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_sums_in_child, args=(x, openmp, queue))
    child.start()
    try:
        return queue.get(timeout=600)  # a child waiting on the parent's threads: never
    finally:
        child.join(timeout=600)
        if child.exitcode is None:
            child.kill()
        assert child.exitcode == 0


@needs_cc
def test_the_heads_threads_are_started_once_per_process_and_a_forked_child_starts_its_own():
    """One pool per process and thread count (posviz's own threads, where no OpenMP runtime is used): a call after
    the first starts no thread; a child forked after the parent's pool was made has the parent's dict but none of its
    threads, and must compute with its own."""
    x = inputs(200, True, None, None, 1, 4, 2, 16, torch.float32, seed=3)
    first = accumulate_native(x, threads=2, openmp=False).numpy()["entropy"]
    threads = _pool_threads()  # this pool's, and any other test's in this process (another thread count)
    assert threads and (os.getpid(), 1) in native._POOLS  # one thread beside the caller's
    again = accumulate_native(x, threads=2, openmp=False).numpy()["entropy"]
    assert _pool_threads() == threads  # the same threads, none started
    np.testing.assert_array_equal(again, first)
    child = _in_forked_child(x, False)
    if child is not None:
        np.testing.assert_array_equal(child, first)


@needs_cc
@pytest.mark.skipif(native.openmp_runtime() is None, reason="no OpenMP runtime in this process's global symbols")
@pytest.mark.parametrize("given", [False, True], ids=["two-pass", "one-pass"])
def test_the_heads_on_the_openmp_threads_sum_what_one_thread_and_our_own_threads_sum(given):
    """PyTorch's OpenMP threads, posviz's own threads and the calling thread alone give the same sums, bit for bit
    (each head is one thread's), whatever the share of heads per thread (6 heads on 2 and on 4 threads; two blocks,
    three query heads per key head); no thread of posviz's own is started."""
    x = inputs(150, True, None, None, 2, 6, 2, 16, torch.float32, seed=5)
    x = with_normalisers(x) if given else x
    alone = accumulate_native(x, threads=1).numpy()
    before = _pool_threads()
    for threads in (2, 4):
        on_openmp = accumulate_native(x, threads=threads, openmp=True).numpy()
        for name, value in alone.items():
            np.testing.assert_array_equal(on_openmp[name], value, err_msg=f"{name}, {threads} threads")
    assert _pool_threads() == before
    ours = accumulate_native(x, threads=2, openmp=False).numpy()
    for name, value in alone.items():
        np.testing.assert_array_equal(ours[name], value, err_msg=name)


@needs_cc
@pytest.mark.skipif(native.openmp_runtime() is None, reason="no OpenMP runtime in this process's global symbols")
def test_a_child_forked_after_the_openmp_threads_ran_computes_on_threads_of_its_own():
    """GNU libgomp's threads do not survive a fork: a parallel region in the child would wait for ever. The child
    takes threads of its own (and says so: no runtime), and sums what the parent summed."""
    x = inputs(200, True, None, None, 1, 4, 2, 16, torch.float32, seed=3)
    first = accumulate_native(x, threads=2, openmp=True).numpy()["entropy"]
    child = _in_forked_child(x, None)
    if child is not None:
        np.testing.assert_array_equal(child, first)


@needs_cc
def test_asking_for_the_openmp_threads_where_there_are_none_is_an_error(monkeypatch):
    monkeypatch.setattr(native, "_FORKED", [True])  # as in a forked child
    assert native.openmp_runtime() is None
    x = inputs(40, True, None, None, 1, 2, 1, 8, torch.float32, seed=0)
    with pytest.raises(RuntimeError, match="no OpenMP runtime"):
        accumulate_native(x, threads=2, openmp=True)
    np.testing.assert_array_equal(accumulate_native(x, threads=2).numpy()["entropy"],
                                  accumulate_native(x, threads=1).numpy()["entropy"])


def test_loading_the_library_leaves_the_arithmetic_of_the_process_as_it_was():
    """Linked with -ffast-math, a library sets flush-to-zero for the process as it loads: subnormal floats would then
    read as zero in every computation of the process, not only in the kernel."""
    tiny = np.float32(1e-40)
    assert tiny * np.float32(1.0) != 0  # subnormals work before ...
    native_library()
    assert tiny * np.float32(1.0) != 0 and torch.tensor([1e-40]).mul(1.0).item() != 0  # ... and after


@pytest.fixture
def broken_cc(tmp_path, monkeypatch, fresh_library) -> Path:
    cc = tmp_path / "cc"
    cc.write_text("#!/bin/sh\necho 'cc: fatal error: no input files' >&2\nexit 1\n")
    cc.chmod(cc.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("CC", str(cc))
    return cc


def test_a_compiler_that_fails_says_why_and_the_pytorch_tiles_compute_instead(broken_cc, monkeypatch):
    x = inputs(40, True, None, None, 1, 2, 1, 8, torch.float32, seed=0)
    assert native_library() == (None, f"{broken_cc} failed: cc: fatal error: no input files")
    monkeypatch.delenv(KERNEL_ENV, raising=False)
    with pytest.warns(UserWarning, match=r"compiled CPU kernel .* cannot be had \(.*failed: cc: fatal error"):
        assert choose_kernel(x) == "torch"
    with pytest.warns(UserWarning):
        sums = accumulate(x)  # the PyTorch tiles
    assert sums.blocks == 1 and float(sums.row_mass.sum()) == pytest.approx(2 * 40, abs=1e-5)
    with pytest.raises(OptionError, match="POSVIZ_TILED_KERNEL=native: the compiled CPU kernel cannot run here: .* failed"):
        choose_kernel(x, "native")


def test_no_compiler_on_path_is_named(monkeypatch, fresh_library):
    monkeypatch.setenv("CC", "no-such-compiler-posviz")
    assert native_library() == (None, "no C compiler (no-such-compiler-posviz) on PATH")


@needs_cc
def test_the_compiled_kernel_is_chosen_only_where_it_can_run(monkeypatch):
    q = torch.zeros(1, 2, 8, 16)
    plain = AttentionInputs(q, q, 0.25, Support(8, True))
    biased = AttentionInputs(q, q, 0.25, Support(8, True), bias=lambda *a: None)
    monkeypatch.delenv(KERNEL_ENV, raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback warning where the kernel runs, nor for an additive term
        assert choose_kernel(plain) == "native" and choose_kernel(biased) == "torch"
    assert why_not_native(biased) == "its attention adds a positional term"
    assert choose_kernel(plain, "torch") == "torch" and choose_kernel(plain, "native") == "native"
    with pytest.raises(OptionError, match="POSVIZ_TILED_KERNEL=triton: the fused kernel cannot run here: its tensors are on cpu"):
        choose_kernel(plain, "triton")
    with pytest.raises(OptionError, match="POSVIZ_TILED_KERNEL=native: the compiled CPU kernel cannot run here: its attention adds"):
        choose_kernel(biased, "native")


@needs_cc
def test_the_library_is_compiled_once_into_the_posviz_cache(fresh_library, _isolated_score_cache):
    lib, why = native_library()
    assert why is None and lib is not None
    built = list((_isolated_score_cache / "native").glob("tiled-*.so"))
    assert len(built) == 1 and not list((_isolated_score_cache / "native").glob("*.o"))
    native_library.cache_clear()
    stamp = built[0].stat().st_mtime_ns
    assert native_library()[1] is None and built[0].stat().st_mtime_ns == stamp  # loaded, not compiled again
    assert native.SOURCE.name == "native_kernel.c" and native.SOURCE.exists()


@needs_cc
def test_a_compiler_command_with_arguments_compiles(monkeypatch, fresh_library, _isolated_score_cache):
    """``$CC`` is a command line (``ccache gcc``), not one file name; it goes into the library's hash."""
    monkeypatch.setenv("CC", "env cc")
    lib, why = native_library()
    assert why is None and lib is not None
    assert len(list((_isolated_score_cache / "native").glob("tiled-*.so"))) == 1
    x = inputs(70, True, None, None, 1, 2, 1, 16, torch.float32, seed=1)
    monkeypatch.setenv(KERNEL_ENV, "torch")
    assert_same_sums(accumulate_native(x), accumulate(x), Support(70, True, None))


@needs_cc
@pytest.mark.parametrize("width", [4, 8, 16])
def test_every_vector_width_of_the_kernel_gives_the_same_sums(width, monkeypatch, fresh_library, _isolated_score_cache):
    """The kernel's vectors are as wide as the CPU's registers (16 floats with AVX-512, else 8); ``-DPOSVIZ_VL``
    compiles any width on any CPU (a wider one spills to the stack, slower, same arithmetic), so each layout of the
    logits and the exponentials is checked here, with lengths that leave remainders after every vector loop."""
    monkeypatch.setenv("CC", f"cc -DPOSVIZ_VL={width}")
    assert native_library()[1] is None
    monkeypatch.setenv(KERNEL_ENV, "torch")
    for n, causal, window, cap in ((203, True, None, None), (150, False, 37, 5.0)):
        x = inputs(n, causal, window, cap, 1, 4, 2, 20, torch.float32, seed=n)
        assert_same_sums(accumulate_native(x), accumulate(x), Support(n, causal, window))


@needs_cc
def test_an_unusable_cache_compiles_into_a_folder_removed_once_loaded(monkeypatch, fresh_library, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("POSVIZ_CACHE_DIR", str(blocker / "cache"))  # no folder can be made under a file
    monkeypatch.setattr(native.tempfile, "tempdir", str(tmp_path))  # mkdtemp's folder, where this test sees it
    lib, why = native_library()
    assert why is None and lib is not None
    assert [p.name for p in tmp_path.iterdir()] == ["a-file"]  # the scratch folder is gone, the library loaded
    x = inputs(40, False, None, None, 1, 2, 2, 8, torch.float32, seed=2)
    monkeypatch.setenv(KERNEL_ENV, "torch")
    assert_same_sums(accumulate_native(x), accumulate(x), Support(40, False, None))


def test_a_compiler_that_hangs_is_given_up_after_the_timeout(tmp_path, monkeypatch, fresh_library):
    cc = tmp_path / "slow-cc"
    cc.write_text('#!/bin/sh\nif [ "$1" = --version ]; then echo slow-cc 1.0; exit 0; fi\nexec sleep 60\n')
    cc.chmod(cc.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("CC", str(cc))
    monkeypatch.setattr(native, "COMPILE_TIMEOUT", 1)
    assert native_library() == (None, f"{cc} took more than 1 s")


def test_a_compiler_command_that_is_not_a_command_line_is_named(monkeypatch, fresh_library):
    monkeypatch.setenv("CC", "gcc '-O2")  # an unbalanced quote
    assert native_library() == (None, "$CC is not a command line: No closing quotation")


def test_a_compiler_that_cannot_run_says_why(tmp_path, monkeypatch, fresh_library):
    """A compiler that answers ``--version`` and is gone when the kernel is compiled: one line, no exception."""
    cc = tmp_path / "vanishing-cc"
    cc.write_text('#!/bin/sh\nrm -f "$0"\necho vanishing-cc 1.0\n')
    cc.chmod(cc.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("CC", str(cc))
    lib, why = native_library()
    assert lib is None and why.startswith(f"{cc} cannot run: ") and "No such file" in why
