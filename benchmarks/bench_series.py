"""Benchmark 9: a MultiBERTs-shaped checkpoint series from the Hub, fetched concurrently.

Builds 5 seeds x 28 checkpoints of a BERT-base ``BertForPreTraining`` (real tensor names and shapes, float32
safetensors of 420 MiB each) sparse: only each checkpoint's own position table E_P (512 x 768, distinct random
values) is written, the rest of the file is a hole. The Hub emulator of the test suite serves them as
``google/multiberts-seed_S-step_Kk`` at 100 MB/s (``--rate``) and 30 ms per request (``--latency``), and
``posviz trajectory`` of all 140 ids runs as a whole process with fresh caches, once with the default pool of
fetch workers and once with ``POSVIZ_FETCH_WORKERS=1`` (one checkpoint after the other). Weight files are served
as the Hub serves LFS files (a 302 from ``resolve`` to a CDN address; ``--no-cdn`` serves them directly).

Reported: wall time, the time the capped link alone needs for the bytes sent and the ratio of the two, the CPU
time of the ``posviz`` process tree and of the emulator (this process's threads) while it ran, peak memory,
requests (per checkpoint too) and body bytes sent, against the bytes of the 140 position tables, and how many
rows the series checks flagged (none: every checkpoint is distinct and on its path).
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import struct
import sys
from pathlib import Path

import numpy as np
from harness import posviz_cmd, run_measured

ROOT = Path(__file__).resolve().parent.parent
SEEDS = 5
STEPS = [0, 20, 40, 60, 80, 100, 120, 140, 160, 180, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 1200, 1400,
         1600, 1800, 2000, 2200, 2400, 2600, 2800, 3000][:28]
EP = "bert.embeddings.position_embeddings.weight"


def _shapes() -> list[tuple[str, tuple[int, ...]]]:
    """The state-dict names and shapes of BertForPreTraining (bert-base-uncased), built on the meta device."""
    import torch
    from transformers import BertConfig, BertForPreTraining

    with torch.device("meta"):
        model = BertForPreTraining(BertConfig())
    return [(n, tuple(t.shape)) for n, t in model.state_dict().items() if not n.endswith("position_ids")]


def build(root: Path) -> dict[str, Path]:
    """The 140 sparse checkpoints; returns ``{hub id: folder}``."""
    from transformers import BertConfig

    config = {**BertConfig().to_dict(), "architectures": ["BertForPreTraining"], "model_type": "bert"}
    shapes = _shapes()
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in shapes:
        n = 4 * int(np.prod(shape))
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    start = 8 + len(raw)
    repos = {}
    rng = np.random.default_rng(0)
    for seed in range(SEEDS):
        for step in STEPS:
            repo = f"google/multiberts-seed_{seed}-step_{step}k"
            folder = root / repo.replace("/", "--")
            repos[repo] = folder
            if (folder / "model.safetensors").exists():
                continue
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "config.json").write_text(json.dumps(config, indent=2))
            with open(folder / "model.safetensors", "wb") as f:
                f.write(struct.pack("<Q", len(raw)) + raw)
                f.truncate(start + offset)
                f.seek(start + header[EP]["data_offsets"][0])
                f.write((0.02 * rng.standard_normal((512, 768))).astype("<f4").tobytes())
    return repos


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--work", type=Path, default=Path(__file__).parent / "work" / "series")
    ap.add_argument("--rate", type=float, default=100e6, help="bandwidth cap of the emulator in bytes/s (default 100 MB/s)")
    ap.add_argument("--latency", type=float, default=0.03, help="seconds per request (default 0.03)")
    ap.add_argument("--workers", default="16,1", help="POSVIZ_FETCH_WORKERS values to measure (default 16,1)")
    ap.add_argument("--null-draws", type=int, default=None,
                    help="pass --null-draws N to posviz (0: the exact null mean only, which shows the fetching alone)")
    ap.add_argument("--no-cdn", dest="cdn", action="store_false",
                    help="serve weight files directly (default: as the Hub serves LFS files, a 302 to a CDN address)")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from bench_hub import clean_env

    from tests.hub_emulator import HubEmulator

    repos = build(args.work / "models")
    ep_bytes = len(repos) * 512 * 768 * 4
    rows = []
    with HubEmulator(rate=args.rate, latency=args.latency) as hub:
        hub.hash_limit = 2**20  # sparse files: a cheap ETag instead of hashing 420 MiB of holes each
        hub.cdn = args.cdn
        for repo, folder in repos.items():
            hub.add(repo, folder)
        for workers in args.workers.split(","):
            home = args.work / "round"
            shutil.rmtree(home, ignore_errors=True)
            home.mkdir(parents=True)
            env = {**clean_env(home, hub.endpoint), "POSVIZ_FETCH_WORKERS": workers}
            hub.reset()
            extra = [] if args.null_draws is None else ["--null-draws", str(args.null_draws)]
            before = resource.getrusage(resource.RUSAGE_SELF)  # the emulator's threads run in this process
            res = run_measured(posviz_cmd("trajectory", *repos, *extra, "-o", str(home / "rows.json")), env)
            after = resource.getrusage(resource.RUSAGE_SELF)
            wall, peak = res["wall"], res["peak"]
            emulator_cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
            got = json.loads((home / "rows.json").read_text())
            flagged = sum(r.get("duplicate_of") is not None or bool(r.get("suspect")) for r in got)
            weights = sum(hub.file_bytes(r, "model.safetensors") for r in repos)
            link = hub.bytes_sent / args.rate  # seconds the capped link alone needs for what was sent
            rows.append({"fetch workers": workers, "wall_s": round(wall, 2), "link_s": round(link, 2),
                         "wall_over_link": round(wall / link, 2), "posviz_cpu_s": round(res["cpu"], 2),
                         "emulator_cpu_s": round(emulator_cpu, 2), "peak_mib": round(peak),
                         "requests": len(hub.requests), "sent_mib": round(hub.bytes_sent / 2**20, 1),
                         "weights_sent_mib": round(weights / 2**20, 1), "E_P_mib": round(ep_bytes / 2**20, 1),
                         "ratio_to_E_P": round(hub.bytes_sent / ep_bytes, 3), "rows": len(got),
                         "requests_per_checkpoint": round(len(hub.requests) / len(repos), 1), "flagged": flagged})
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return rows


if __name__ == "__main__":
    from harness import markdown_table

    print(markdown_table(main()))
