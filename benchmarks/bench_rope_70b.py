"""Benchmark 8: RoPE bands and probe profiles of layer 0 of a Llama-3.1-70B-shaped Hub checkpoint.

Builds the checkpoint sparse: the real configuration (hidden 8192, 80 layers, 64 query and 8 key/value heads of
128 dims, vocabulary 128256, llama3 rope scaling) and the real layout (bf16 safetensors, 30 shards of at most 5 GB,
``model.safetensors.index.json``), 141 GB in all, but only the bytes posviz must read are written (layer 0's
q/k projections and input norm, one embedding row for the probe); the rest of each shard is a hole. The Hub
emulator of the test suite serves it at 100 MB/s (``--rate``) with ``--latency`` per request, and
``posviz heads ORG/NAME --layer 0 --probe token:ID --format json`` runs as a whole process with fresh caches.

Reported: wall time, peak memory, the body bytes the emulator sent, which tensors they touched (nothing may be
fetched beyond layer 0's q/k and norm, the probe row and the headers), and the largest relative difference of the
band energies from a direct numpy computation on the same bytes.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import struct
import sys
from pathlib import Path

import numpy as np
from harness import posviz_cmd, run_once

ROOT = Path(__file__).resolve().parent.parent
HIDDEN, LAYERS, HEADS, KV, HEAD_DIM, INTER, VOCAB = 8192, 80, 64, 8, 128, 28672, 128256
PROBE_TOKEN = 128000  # <|begin_of_text|>
SHARD_BYTES = 5 * 10**9
CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": HIDDEN, "intermediate_size": INTER,
    "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "num_key_value_heads": KV, "head_dim": HEAD_DIM,
    "vocab_size": VOCAB, "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192},
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "bos_token_id": 128000, "eos_token_id": 128001,
}


def _tensors() -> list[tuple[str, tuple[int, ...]]]:
    """Every tensor of LlamaForCausalLM at this size, in checkpoint order."""
    out = [("model.embed_tokens.weight", (VOCAB, HIDDEN))]
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", (HIDDEN,)), (p + "self_attn.q_proj.weight", (HEADS * HEAD_DIM, HIDDEN)),
                (p + "self_attn.k_proj.weight", (KV * HEAD_DIM, HIDDEN)), (p + "self_attn.v_proj.weight", (KV * HEAD_DIM, HIDDEN)),
                (p + "self_attn.o_proj.weight", (HIDDEN, HEADS * HEAD_DIM)), (p + "post_attention_layernorm.weight", (HIDDEN,)),
                (p + "mlp.gate_proj.weight", (INTER, HIDDEN)), (p + "mlp.up_proj.weight", (INTER, HIDDEN)),
                (p + "mlp.down_proj.weight", (HIDDEN, INTER))]
    return out + [("model.norm.weight", (HIDDEN,)), ("lm_head.weight", (VOCAB, HIDDEN))]


def _bf16(values: np.ndarray) -> bytes:
    """float32 -> bfloat16 bytes (round to nearest even)."""
    bits = values.astype(np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2").tobytes()


def build(folder: Path) -> dict[str, tuple[str, int]]:
    """Write the sparse checkpoint; returns ``{written tensor: (shard, absolute byte offset)}``."""
    written = {"model.embed_tokens.weight", "model.layers.0.input_layernorm.weight",
               "model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight"}
    if (folder / "where.json").exists():
        return json.loads((folder / "where.json").read_text())
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    shards: list[list[tuple[str, tuple[int, ...]]]] = [[]]
    size = 0
    for name, shape in _tensors():
        n = 2 * int(np.prod(shape))
        if size + n > SHARD_BYTES and shards[-1]:
            shards.append([])
            size = 0
        shards[-1].append((name, shape))
        size += n
    rng = np.random.default_rng(0)
    weight_map, where = {}, {}
    for k, tensors in enumerate(shards):
        fname = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
        header, offset = {"__metadata__": {"format": "pt"}}, 0
        for name, shape in tensors:
            n = 2 * int(np.prod(shape))
            header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + n]}
            offset += n
            weight_map[name] = fname
        raw = json.dumps(header, separators=(",", ":")).encode()
        raw += b" " * (-len(raw) % 8)
        start = 8 + len(raw)
        with open(folder / fname, "wb") as f:
            f.write(struct.pack("<Q", len(raw)) + raw)
            f.truncate(start + offset)  # a hole where no byte is needed
            for name, shape in tensors:
                if name not in written:
                    continue
                begin = start + header[name]["data_offsets"][0]
                where[name] = (fname, begin)
                if name == "model.embed_tokens.weight":  # only the probe's row
                    f.seek(begin + PROBE_TOKEN * HIDDEN * 2)
                    f.write(_bf16(rng.standard_normal(HIDDEN, dtype=np.float32) * 0.01))
                    continue
                scale = 1.0 if name.endswith("layernorm.weight") else 0.02
                base = 1.0 if name.endswith("layernorm.weight") else 0.0
                f.seek(begin)
                for row in range(0, shape[0], 1024):  # in blocks, to keep memory low
                    rows = min(1024, shape[0] - row)
                    block = base + scale * rng.standard_normal((rows, *shape[1:]), dtype=np.float32)
                    f.write(_bf16(block))
    total = sum(2 * int(np.prod(s)) for _, s in _tensors())
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}))
    (folder / "config.json").write_text(json.dumps(CONFIG, indent=2))
    (folder / "where.json").write_text(json.dumps(where))
    return where


def reference_energy(folder: Path, where: dict) -> np.ndarray:
    """Band energies straight from the bytes: rotate-half bands, key group h // 8, input RMSNorm gain folded in."""
    def read(name: str, shape: tuple[int, ...]) -> np.ndarray:
        fname, begin = where[name]
        bits = np.fromfile(folder / fname, dtype="<u2", count=int(np.prod(shape)), offset=begin)
        return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64).reshape(shape)

    gamma = read("model.layers.0.input_layernorm.weight", (HIDDEN,))
    wq = read("model.layers.0.self_attn.q_proj.weight", (HEADS, HEAD_DIM, HIDDEN)) * gamma
    wk = read("model.layers.0.self_attn.k_proj.weight", (KV, HEAD_DIM, HIDDEN)) * gamma
    half = HEAD_DIM // 2
    nq = np.sqrt((wq[:, :half] ** 2).sum(-1) + (wq[:, half:] ** 2).sum(-1))
    nk = np.sqrt((wk[:, :half] ** 2).sum(-1) + (wk[:, half:] ** 2).sum(-1))
    return nq * nk[np.arange(HEADS) // (HEADS // KV)]


def touched(hub, folder: Path) -> dict[str, int]:
    """Bytes sent per tensor (``header`` for the header of a shard), from the emulator's ranges."""
    out: dict[str, int] = {}
    for fname in sorted(p.name for p in folder.glob("*.safetensors")):
        raw = (folder / fname).open("rb").read(8)
        (hlen,) = struct.unpack("<Q", raw)
        header = json.loads((folder / fname).open("rb").read(8 + hlen)[8:])
        start = 8 + hlen
        for a, b in hub.ranges("org/llama-3.1-70b-shaped", fname):
            if a < start:
                out["header"] = out.get("header", 0) + min(b, start) - a
            for name, e in header.items():
                if name == "__metadata__":
                    continue
                lo, hi = max(a, start + e["data_offsets"][0]), min(b, start + e["data_offsets"][1])
                if hi > lo:
                    out[name] = out.get(name, 0) + hi - lo
    return out


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--work", type=Path, default=Path(__file__).parent / "work" / "rope70b")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rate", type=float, default=100e6, help="bandwidth cap of the emulator in bytes/s (default 100 MB/s)")
    ap.add_argument("--latency", type=float, default=0.03, help="seconds per request (default 0.03)")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from bench_hub import clean_env

    from tests.hub_emulator import HubEmulator

    folder = args.work / "model"
    where = build(folder)
    expected = reference_energy(folder, where)
    q_k_norm = 2 * (HEADS * HEAD_DIM * HIDDEN + KV * HEAD_DIM * HIDDEN + HIDDEN)
    walls, peaks, rows = [], [], []
    with HubEmulator(rate=args.rate, latency=args.latency) as hub:
        hub.add("org/llama-3.1-70b-shaped", folder)
        for _ in range(args.repeats):
            home = args.work / "round"
            shutil.rmtree(home, ignore_errors=True)
            home.mkdir(parents=True)
            out = home / "bands.json"
            hub.reset()
            cmd = posviz_cmd("heads", "org/llama-3.1-70b-shaped", "--layer", "0", "--probe", f"token:{PROBE_TOKEN}",
                             "-o", str(out))
            wall, peak = run_once(cmd, clean_env(home, hub.endpoint))
            result = json.loads(out.read_text())
            per_tensor = touched(hub, folder)
            walls.append(wall)
            peaks.append(peak)
            energy = np.array([r["band_energy"] for r in result])
            rows.append({"wall_s": round(wall, 2), "peak_mib": round(peak), "sent_mib": round(hub.bytes_sent / 2**20, 2),
                         "weights_mib": round(sum(per_tensor.values()) / 2**20, 2), "requests": len(hub.requests),
                         "tensors": sorted(per_tensor), "q_k_norm_mib": round(q_k_norm / 2**20, 2),
                         "max_rel_diff": float(np.max(np.abs(energy - expected) / np.abs(expected)))})
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    total = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
    print(f"checkpoint {total / 1e9:.1f} GB in {len(list(folder.glob('*.safetensors')))} shards; "
          f"wall {statistics.median(walls):.2f} s (min {min(walls):.2f}, max {max(walls):.2f}), "
          f"peak {statistics.median(peaks):.0f} MiB", file=sys.stderr)
    return rows


if __name__ == "__main__":
    from harness import markdown_table

    print(markdown_table(main()))
