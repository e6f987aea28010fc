"""The tiled attention statistics as a compiled C loop on the CPU, for attention without an additive term.

:func:`~posviz.observe.tiled.kernel.accumulate` composes some twenty PyTorch operations per tile, each a trip
through memory over float32 and float64 copies of the tile; on a CPU that cost 6-21 times the model's own SDPA
forward (benchmarks/README.md, section 16). ``native_kernel.c`` computes the same sums with one pass of logits per
query tile: the logits of one row and one chunk of keys stay in the L1 cache from the dot products to every
per-query sum, and the tile's exponentials are kept for the sums over queries (the CPU counterpart of the fused
Triton kernel of :mod:`~posviz.observe.tiled.fused`).

The C file is compiled once per machine and compiler with the system's C compiler (``$CC``, else ``cc``) into
posviz's cache folder (``native/``), and loaded with :mod:`ctypes`. The heads of a layer run in parallel on the
threads of PyTorch's OpenMP runtime, which the C side calls through its ``GOMP_parallel`` entry
(:func:`openmp_runtime`): those threads spin for milliseconds after each of PyTorch's parallel operations, and
threads of our own beside them lost the second core; where there is no such runtime, or in a forked child, on
threads of posviz's own (a ctypes call releases the GIL). Where no compiler works, :func:`native_library` says why
and the PyTorch tiles are used.

Where the model's own attention handed out each query's log-sum-exp (:mod:`~posviz.observe.tiled.normalisers`),
``posviz_head_statistics_lse`` takes one pass instead: each weight goes straight into every sum, and no
exponentials are kept.

Supported: every support (causal, sliding window, full) and a logit cap, with no additive term, as the fused kernel.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shlex
import shutil
import subprocess
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from posviz.observe.tiled.sums import MAP_SIZE, TiledSums, distance_bins

SOURCE = Path(__file__).with_name("native_kernel.c")
#: Compiler flags. The object is linked in a second command without ``-ffast-math``: linked with it, the library
#: would set flush-to-zero for the whole process (crtfastmath) as it loads, and change the arithmetic of everything
#: else in it.
FLAGS = ("-O3", "-ffast-math", "-fPIC")
#: Flags for this machine's CPU, tried in turn until the compiler takes them (x86-64: AVX-512 vectors where the CPU
#: has them; other compilers and CPUs may refuse the second flag, or both).
TUNING = (("-march=native", "-mprefer-vector-width=512"), ("-march=native",), ())
SUM_FIELDS = ("offsets", "row_mass", "row_sq", "row_sum_sq", "entropy", "max_weight", "received", "sink", "span50", "span90",
              "map")


class _Params(ctypes.Structure):
    _fields_ = [("n", ctypes.c_int64), ("d", ctypes.c_int64), ("map", ctypes.c_int64), ("scale", ctypes.c_float),
                ("softcap", ctypes.c_float), ("causal", ctypes.c_int64), ("window", ctypes.c_int64),
                ("edges", ctypes.c_void_p), ("bin_of", ctypes.c_void_p), ("bins", ctypes.c_int64), ("ldk", ctypes.c_int64)]


class _Sums(ctypes.Structure):
    _fields_ = [(name, ctypes.c_void_p) for name in SUM_FIELDS]


class _Job(ctypes.Structure):
    _fields_ = [("p", ctypes.POINTER(_Params)), ("batch", ctypes.c_int64), ("heads", ctypes.c_int64), ("group", ctypes.c_int64),
                ("q", ctypes.c_void_p), ("kt", ctypes.c_void_p), ("lse", ctypes.c_void_p), ("kt_stride", ctypes.c_int64),
                ("base", _Sums), ("stride", ctypes.c_int64 * len(SUM_FIELDS)), ("thread_num", ctypes.c_void_p),
                ("num_threads", ctypes.c_void_p), ("code", ctypes.c_int)]


def cpu_lines() -> list[str] | None:
    """The lines of ``/proc/cpuinfo`` that say what ``-march=native`` compiles for (``model name``, ``flags``; ARM's
    ``Features``), each once and sorted; None where there is no such file (not Linux)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    return sorted({line for line in text.splitlines() if line.startswith(("model name", "flags", "Features"))})


def _cpu_signature() -> str:
    """What ``-march=native`` compiles for: the CPU's model and flags (Linux), else the machine's name."""
    lines = cpu_lines()
    return platform.machine() + platform.processor() if lines is None else "\n".join(lines)


#: Seconds a compiler command may take (the kernel compiles in about one second here).
COMPILE_TIMEOUT = 300


def _compile(cc: list[str], target: Path) -> str | None:
    """Compile :data:`SOURCE` with the command ``cc`` into ``target`` (atomically); None, or why it failed."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    obj = tmp[:-3] + ".o"
    try:
        last = ""
        for extra in TUNING:
            for cmd in ([*cc, *FLAGS, *extra, "-c", str(SOURCE), "-o", obj], [*cc, "-shared", obj, "-o", tmp, "-lm"]):
                try:
                    r = subprocess.run(cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT)
                except subprocess.TimeoutExpired:
                    return f"{shlex.join(cc)} took more than {COMPILE_TIMEOUT} s"
                except OSError as err:  # found on PATH but not runnable
                    return f"{shlex.join(cc)} cannot run: {err}"
                if r.returncode != 0:
                    last = (r.stderr.strip().splitlines() or [f"exit status {r.returncode}"])[-1]
                    break
            else:
                os.replace(tmp, target)
                return None
        return f"{shlex.join(cc)} failed: {last}"
    finally:
        for path in (tmp, obj):
            if os.path.exists(path):
                os.unlink(path)


@functools.lru_cache(maxsize=1)
def native_library() -> tuple[Any, str | None]:
    """The compiled kernel (a ctypes library), compiling it on first use; ``(None, why)`` where it cannot be had.

    The compiler is ``$CC`` (a command, arguments allowed: ``ccache gcc``), else ``cc``.
    """
    from posviz.util.paths import cache_dir

    try:
        cc = shlex.split(os.environ.get("CC") or "cc") or ["cc"]
    except ValueError as err:  # an unbalanced quote
        return None, f"$CC is not a command line: {err}"
    if shutil.which(cc[0]) is None:
        return None, f"no C compiler ({cc[0]}) on PATH"
    try:
        version = subprocess.run([*cc, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as err:
        return None, f"{shlex.join(cc)} --version failed: {err}"
    key = hashlib.sha256("\0".join([SOURCE.read_text(), *cc, version, repr((FLAGS, TUNING)), _cpu_signature()]).encode()).hexdigest()
    target, scratch = cache_dir("native", f"tiled-{key[:16]}.so"), None
    if not target.exists():
        try:
            why = _compile(cc, target)
        except OSError:  # no writable cache: compile into a folder of this process, removed once loaded
            scratch = Path(tempfile.mkdtemp(prefix="posviz-native-"))
            target = scratch / target.name
            why = _compile(cc, target)
        if why is not None:
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)
            return None, why
    try:
        lib = ctypes.CDLL(str(target))
    except OSError as err:
        return None, f"cannot load {target.name}: {err}"
    finally:
        if scratch is not None:  # a loaded library stays mapped after its file is gone
            shutil.rmtree(scratch, ignore_errors=True)
    lib.posviz_head_statistics.argtypes = [ctypes.POINTER(_Params), ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(_Sums)]
    lib.posviz_head_statistics.restype = ctypes.c_int
    lib.posviz_head_statistics_lse.argtypes = [ctypes.POINTER(_Params), ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                               ctypes.POINTER(_Sums)]
    lib.posviz_head_statistics_lse.restype = ctypes.c_int
    lib.posviz_heads_openmp.argtypes = [ctypes.c_void_p, ctypes.POINTER(_Job), ctypes.c_int64]
    lib.posviz_heads_openmp.restype = ctypes.c_int
    lib.posviz_heads_share.argtypes = [ctypes.POINTER(_Job), ctypes.c_int64, ctypes.c_int64]
    lib.posviz_heads_share.restype = ctypes.c_int
    lib.posviz_key_stride.argtypes = [ctypes.c_int64, ctypes.c_int64]
    lib.posviz_key_stride.restype = ctypes.c_int64
    return lib, None


_POOLS: dict[tuple[int, int], ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()


def _pool(workers: int) -> ThreadPoolExecutor:
    """The process's pool of ``workers`` threads for the heads, made once: a pool made per call started its threads
    on every layer and block, which short blocks paid for (12 heads x 128 positions: 3.4-4.5 ms a call, 1.4 ms with
    the pool; benchmarks/README.md, section 16). Keyed by the process too: a forked child inherits the dict but not
    the threads."""
    key = (os.getpid(), workers)
    with _POOLS_LOCK:
        if key not in _POOLS:
            _POOLS[key] = ThreadPoolExecutor(workers, thread_name_prefix="posviz-tiled")
        return _POOLS[key]


#: Set in a forked child: GNU libgomp's threads do not survive a fork, and a parallel region in a child of a parent
#: that had one waits for ever (PyTorch's own operations too); a child computes on threads of its own.
_FORKED = [False]
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=lambda: _FORKED.__setitem__(0, True))


def openmp_runtime() -> tuple[int, int, int] | None:
    """The addresses of ``GOMP_parallel``, ``omp_get_thread_num`` and ``omp_get_num_threads`` of the OpenMP runtime
    in the process's global symbols (PyTorch's, once torch is imported: libgomp on Linux), or None where there is
    none or this process is a forked child. The kernel's heads run on that runtime's threads
    (``posviz_heads_openmp``)."""
    return None if _FORKED[0] else _openmp_symbols()


@functools.lru_cache(maxsize=1)
def _openmp_symbols() -> tuple[int, int, int] | None:
    import torch  # noqa: F401  (its runtime is the one to find)

    try:
        process = ctypes.CDLL(None)
        return tuple(ctypes.cast(getattr(process, name), ctypes.c_void_p).value
                     for name in ("GOMP_parallel", "omp_get_thread_num", "omp_get_num_threads"))
    except (OSError, AttributeError, TypeError):  # no such symbols (another runtime; Windows: no CDLL(None))
        return None


def why_not_native(inputs: Any) -> str | None:
    """Why ``inputs`` cannot take the compiled CPU kernel (None: it can)."""
    if inputs.bias is not None:
        return "its attention adds a positional term"
    if inputs.query.device.type != "cpu":
        return f"its tensors are on {inputs.query.device.type}, not the CPU"
    return native_library()[1]


def accumulate_native(inputs: Any, sums: TiledSums | None = None, *, map_size: int = MAP_SIZE,
                      threads: int | None = None, openmp: bool | None = None) -> TiledSums:
    """Add every block of ``inputs`` to ``sums`` with the compiled CPU kernel (new sums when None); returns the sums.

    Parameters
    ----------
    inputs
        One layer's queries, keys and support, on the CPU; no additive term. With their normalisers (``lse``) the
        kernel takes one pass over the logits, else two.
    sums
        The layer's sums so far (float64, contiguous, on the CPU).
    map_size
        Side of the block-averaged map when new sums are made.
    threads
        Heads computed side by side (None: ``torch.get_num_threads()``).
    openmp
        Run the heads on the threads of the process's OpenMP runtime (:func:`openmp_runtime`; None: where there is
        one), else on threads of posviz's own.

    Raises
    ------
    ValueError
        Inputs the kernel does not take (an additive term, a device other than the CPU).
    RuntimeError
        The kernel cannot be compiled or loaded here, or ran out of memory.
    """
    import numpy as np
    import torch

    why = why_not_native(inputs)
    if why is not None:
        raise (RuntimeError if inputs.bias is None and inputs.query.device.type == "cpu" else ValueError)(
            f"the compiled CPU kernel cannot run: {why}")
    lib = native_library()[0]
    batch, heads, n, d = inputs.query.shape
    if sums is None:
        sums = TiledSums.zeros(heads, n, map_size)
    q = inputs.query.detach().float().contiguous()
    # (batch, kv_heads, d, n): keys along rows, the rows posviz_key_stride floats apart (the rest is never read)
    kt = torch.empty(*inputs.key.shape[:2], d, lib.posviz_key_stride(n, d), dtype=torch.float32)[..., :n]
    kt.copy_(inputs.key.detach().transpose(-1, -2))
    lse = None if inputs.lse is None else inputs.lse.detach().float().contiguous()  # given: one pass (the _lse entry)
    group = heads // kt.shape[1]
    edges, bin_of = (np.ascontiguousarray(x, dtype=np.int64) for x in distance_bins(n))  # the C side reads int64
    support = inputs.support
    params = _Params(n, d, int(sums.map.shape[-1]), float(inputs.scale), float(inputs.softcap or 0.0), int(support.causal),
                     int(support.window or 0), edges.ctypes.data, bin_of.ctypes.data, len(edges) - 1, kt.stride(-2))
    fields = {name: getattr(sums, name) for name in SUM_FIELDS}
    for name, t in fields.items():
        if t.dtype != torch.float64 or t.device.type != "cpu" or not t.is_contiguous():
            raise ValueError(f"the sums' {name} must be contiguous float64 on the CPU")
    runtime = openmp_runtime() if openmp is not False else None
    if openmp and runtime is None:
        raise RuntimeError("the compiled CPU kernel cannot run on OpenMP threads: no OpenMP runtime in this process")
    job = _Job(ctypes.pointer(params), batch, heads, group, q.data_ptr(), kt.data_ptr(), 0 if lse is None else lse.data_ptr(),
               kt.stride(1), _Sums(*(t.data_ptr() for t in fields.values())),
               (ctypes.c_int64 * len(SUM_FIELDS))(*(t.stride(0) for t in fields.values())),
               *(runtime[1:] if runtime else (None, None)))
    workers = max(1, min(heads, threads or torch.get_num_threads()))
    with torch.no_grad():
        if runtime is not None and workers > 1:
            codes = [lib.posviz_heads_openmp(runtime[0], ctypes.byref(job), workers)]
        else:  # threads of our own, one share of consecutive heads each, this thread taking the first
            def share(t: int) -> int:
                return lib.posviz_heads_share(ctypes.byref(job), t, workers)

            others = [_pool(workers - 1).submit(share, t) for t in range(1, workers)] if workers > 1 else []
            codes = [share(0)] + [f.result() for f in others]
    if any(codes):
        raise RuntimeError("the compiled CPU kernel ran out of memory")
    sums.blocks += batch
    return sums
