"""Benchmark 7: Hub range reads against whole-file downloads, through a bandwidth-capped local Hub.

Serves checkpoints (random weights, real architectures' shapes, ``save_pretrained``)
with the Hub emulator of the test suite (``tests/hub_emulator.py``, ``HF_ENDPOINT``
pointing at it, 50 MB/s by default) and runs, as whole processes and alternately,
each with a fresh posviz cache and a fresh Hugging Face cache:

* ``posviz toeplitzness MODEL --format json --no-cache`` (HTTP ranges: header + E_P);
* ``posviz --full-download toeplitzness MODEL --format json --no-cache`` (whole files);

and for the eight ALBERT checkpoints ``posviz toeplitzness --plot-vs-glue``. It counts
the body bytes the emulator sent, times each process, and checks that both paths
give the same Toeplitzness.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from harness import posviz_cmd, run_once

ROOT = Path(__file__).resolve().parent.parent
WEIGHTS = (".safetensors", ".bin")
#: ALBERT sizes as in the published configs: hidden, intermediate, heads, layers (one shared layer group,
#: so the file size does not depend on the number of layers); every size has E_P = 512 x 128.
ALBERT = {"base": (768, 3072, 12, 12), "large": (1024, 4096, 16, 24), "xlarge": (2048, 8192, 16, 24),
          "xxlarge": (4096, 16384, 64, 12)}


@dataclass
class Case:
    """Checkpoints served under hub ids, and the posviz arguments that read them."""

    label: str
    repos: dict[str, Path]  # hub id -> folder
    args: list[str]  # posviz arguments after the global options
    ep_bytes: int  # bytes of the position tables read, all repos together
    compare: bool = True  # the arguments end in ``-o FILE.json``: compare range and full results

    @property
    def total(self) -> int:
        """Bytes of the served weight files."""
        return sum(p.stat().st_size for f in self.repos.values() for p in f.iterdir() if p.name.endswith(WEIGHTS))


def _gpt2(folder: Path, *, n_layer: int, n_embd: int, n_positions: int = 1024, vocab_size: int = 50257,
          shard: str | None = None, binary: bool = False) -> Path:
    """A GPT2LMHeadModel from config (random weights); ``binary``: as pytorch_model.bin (zip)."""
    if (folder / "config.json").exists():
        return folder
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=n_layer, n_embd=n_embd, n_head=max(n_embd // 64, 1), n_positions=n_positions,
                     vocab_size=vocab_size)
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    GPT2LMHeadModel(cfg).save_pretrained(tmp, **({"max_shard_size": shard} if shard else {}))
    if binary:  # transformers 5 writes safetensors only; a .bin as older checkpoints have it (torch's zip)
        from safetensors.torch import load_file

        torch.save(load_file(tmp / "model.safetensors"), tmp / "pytorch_model.bin")
        (tmp / "model.safetensors").unlink()
    tmp.rename(folder)
    return folder


def _albert(folder: Path, size: str, version: str, scale: int = 1) -> Path:
    """An AlbertForMaskedLM with the real config's sizes (divided by ``scale`` for --quick)."""
    if (folder / "config.json").exists():
        return folder
    import torch
    from transformers import AlbertConfig, AlbertForMaskedLM

    hidden, inter, heads, layers = ALBERT[size]
    torch.manual_seed(2 * list(ALBERT).index(size) + (version == "v2"))
    cfg = AlbertConfig(vocab_size=30000 // scale, embedding_size=128, hidden_size=hidden // scale,
                       intermediate_size=inter // scale, num_attention_heads=max(heads // scale, 1),
                       num_hidden_layers=layers, max_position_embeddings=512)
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    AlbertForMaskedLM(cfg).save_pretrained(tmp)
    tmp.rename(folder)
    return folder


def build_cases(work: Path, quick: bool) -> list[Case]:
    """Build (once) every checkpoint under ``work`` and describe the cases."""
    import torch
    from transformers.utils import logging

    torch.set_num_threads(1)
    logging.set_verbosity_error()  # random configs' token ids outside the small vocabularies are fine here
    logging.disable_progress_bar()
    m = work / ("quick" if quick else "full")
    cases = []

    def add(label: str, repo: str, folder: Path, ep: int) -> None:
        cases.append(Case(label, {repo: folder}, ["toeplitzness", repo, "--format", "json", "--no-cache"], ep))

    if quick:
        small = dict(n_layer=2, n_embd=256, vocab_size=8000)
        add("GPT-2-shaped, small, safetensors", "bench/gpt2-small-st", _gpt2(m / "gpt2-small-st", **small), 1024 * 256 * 4)
        add("GPT-2-shaped, small, pytorch_model.bin", "bench/gpt2-small-bin", _gpt2(m / "gpt2-small-bin", binary=True, **small),
            1024 * 256 * 4)
        add("GPT-2-shaped, small, sharded", "bench/gpt2-small-sharded", _gpt2(m / "gpt2-small-sharded", shard="2MB", **small),
            1024 * 256 * 4)
    else:
        medium = dict(n_layer=24, n_embd=1024)
        gpt2 = dict(n_layer=4, n_embd=768)  # 258 MiB: wte 147 MiB, E_P 3 MiB, 4 blocks
        add("GPT-2-medium-shaped, safetensors", "bench/gpt2-medium-st", _gpt2(m / "gpt2-medium-st", **medium), 1024 * 1024 * 4)
        add("GPT-2-medium-shaped, pytorch_model.bin", "bench/gpt2-medium-bin", _gpt2(m / "gpt2-medium-bin", binary=True, **medium),
            1024 * 1024 * 4)
        add("GPT-2-medium-shaped, sharded (200 MB shards)", "bench/gpt2-medium-sharded",
            _gpt2(m / "gpt2-medium-sharded", shard="200MB", **medium), 1024 * 1024 * 4)
        add("GPT-2-shaped 258 MiB, safetensors", "bench/gpt2-258-st", _gpt2(m / "gpt2-258-st", **gpt2), 1024 * 768 * 4)
        add("GPT-2-shaped 258 MiB, pytorch_model.bin", "bench/gpt2-258-bin", _gpt2(m / "gpt2-258-bin", binary=True, **gpt2),
            1024 * 768 * 4)
    repos = {f"albert/albert-{s}-{v}": _albert(m / f"albert-{s}-{v}", s, v, scale=8 if quick else 1)
             for v in ("v1", "v2") for s in ALBERT}
    cases.append(Case("eight ALBERTs, --plot-vs-glue" + (" (sizes / 8)" if quick else ""), repos,
                      ["toeplitzness", "--plot-vs-glue", "--no-cache"], 8 * 512 * 128 * 4, compare=False))
    return cases


def clean_env(home: Path, endpoint: str) -> dict:
    """The environment of one measured run: fresh caches under ``home``, the emulator as the Hub."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HF_", "HUGGINGFACE_", "TRANSFORMERS_", "POSVIZ_", "XDG_"))}
    env.update(HF_ENDPOINT=endpoint, HF_HOME=str(home / "hf"), POSVIZ_CACHE_DIR=str(home / "posviz"),
               XDG_CACHE_HOME=str(home / "xdg"), HF_HUB_DISABLE_TELEMETRY="1", OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    # matplotlib's font cache outlives the rounds (kept beside them), so no round pays for building it
    env["MPLCONFIGDIR"] = str(home.parent / "mplconfig")
    return env


def measure(hub, case: Case, *, full: bool, scratch: Path) -> dict:
    """Run ``case`` once against ``hub`` with fresh caches; bytes sent, wall time, peak memory, result.

    ``hub`` is a started :class:`tests.hub_emulator.HubEmulator` serving ``case.repos``.
    """
    home = scratch / ("full" if full else "range")
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    out = home / "out.json" if case.compare else home / "figure.png"
    cmd = posviz_cmd(*(["--full-download"] if full else []), *case.args, "-o", str(out))
    hub.reset()
    try:
        wall, peak = run_once(cmd, clean_env(home, hub.endpoint))
        weights = {(repo, f): hub.file_bytes(repo, f) for repo, folder in case.repos.items()
                   for f in sorted(p.name for p in folder.iterdir() if p.name.endswith(WEIGHTS))}
        result = json.loads(out.read_text()) if case.compare else None
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return {"wall": wall, "peak": peak, "sent": hub.bytes_sent, "weights_sent": sum(weights.values()),
            "files_touched": sorted(f"{r}/{f}" for (r, f), n in weights.items() if n), "result": result}


def _span(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f} ({min(xs):.2f}–{max(xs):.2f})"


def _mib(n: float) -> str:
    return f"{n / 2**20:.2f} MiB" if n < 2**30 else f"{n / 2**30:.2f} GiB"


def run_case(hub, case: Case, repeats: int, scratch: Path) -> dict:
    """One warm-up range run, then ``repeats`` alternating rounds of range and whole-file runs; one table row."""
    for repo, folder in case.repos.items():
        hub.add(repo, folder)
    measure(hub, case, full=False, scratch=scratch)  # imports and the served files' page cache
    runs: dict[bool, list[dict]] = {False: [], True: []}
    for _ in range(repeats):
        for full in (False, True):
            runs[full].append(measure(hub, case, full=full, scratch=scratch))
    rng, whole = runs[False], runs[True]
    same = "n/a"
    if case.compare:
        a = [r["toeplitzness"] for r in rng[0]["result"]]
        b = [r["toeplitzness"] for r in whole[0]["result"]]
        same = f"{max(abs(x - y) for x, y in zip(a, b, strict=True)):.1e}"
    sent_r, sent_f = statistics.median(r["sent"] for r in rng), statistics.median(r["sent"] for r in whole)
    wr, wf = [r["wall"] for r in rng], [r["wall"] for r in whole]
    touched = rng[0]["files_touched"]
    return {
        "case": case.label,
        "served weights": _mib(case.total),
        "E_P": _mib(case.ep_bytes),
        "range: sent": _mib(sent_r),
        "range: % of weights": f"{100 * sent_r / case.total:.2f}%",
        "full: sent": _mib(sent_f),
        "bytes ratio": f"{sent_f / sent_r:.0f}×",
        "range wall s (min–max)": _span(wr),
        "full wall s (min–max)": _span(wf),
        "speed-up": f"{statistics.median(wf) / statistics.median(wr):.1f}×",
        "range peak MiB": f"{statistics.median(r['peak'] for r in rng):.0f}",
        "full peak MiB": f"{statistics.median(r['peak'] for r in whole):.0f}",
        "weight files read by range": str(len(touched)) + (f" ({touched[0].rsplit('/', 1)[-1]})" if len(touched) == 1 else ""),
        "max |Δ toeplitzness|": same,
    }


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--work", type=Path, default=Path(__file__).parent / "work" / "hub")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rate", type=float, default=50e6, help="bandwidth cap of the emulator in bytes/s (default 50 MB/s)")
    ap.add_argument("--quick", action="store_true", help="small checkpoints (ALBERT sizes / 8), one round")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from tests.hub_emulator import HubEmulator

    args.work.mkdir(parents=True, exist_ok=True)
    cases = build_cases(args.work, args.quick)
    rows = []
    with HubEmulator(rate=args.rate) as hub:
        for case in cases:
            rows.append(run_case(hub, case, 1 if args.quick else args.repeats, args.work / "rounds"))
            print(f"{case.label}: {rows[-1]['range: sent']} vs {rows[-1]['full: sent']}", file=sys.stderr, flush=True)
    return rows


if __name__ == "__main__":
    from harness import markdown_table

    print(markdown_table(main()))
