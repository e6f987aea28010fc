"""The Hub benchmark's measurement (benchmarks/bench_hub.py) on a tiny model: its byte counts are the emulator's."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.checkpoint_factory import build_tiny_checkpoint
from tests.hub_emulator import HubEmulator

pytestmark = pytest.mark.slow  # two posviz processes

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
REPO = "bench/tiny-gpt2"


@pytest.fixture
def bench_hub(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import bench_hub

    return bench_hub


def test_measure_counts_what_the_emulator_sent(bench_hub, tmp_path):
    folder = build_tiny_checkpoint("gpt2", tmp_path / "tiny", n_embd=64, n_layer=3, vocab_size=6000, n_positions=128)
    size = (folder / "model.safetensors").stat().st_size
    ep = 128 * 64 * 4
    case = bench_hub.Case("tiny", {REPO: folder}, ["toeplitzness", REPO, "--format", "json", "--no-cache"], ep)
    assert case.total == size
    with HubEmulator() as hub:
        hub.add(REPO, folder)
        runs = {}
        for full in (False, True):
            r = bench_hub.measure(hub, case, full=full, scratch=tmp_path / "rounds")
            assert r["sent"] == hub.bytes_sent
            assert r["weights_sent"] == hub.file_bytes(REPO, "model.safetensors")
            assert r["weights_sent"] == sum(stop - start for start, stop in hub.ranges(REPO, "model.safetensors"))
            assert r["files_touched"] == [f"{REPO}/model.safetensors"]
            runs[full] = r
    # by range: the header and E_P, a small part of the file; whole: the file, once
    assert ep <= runs[False]["weights_sent"] < size / 4
    assert runs[True]["weights_sent"] == size
    a, b = ([row["toeplitzness"] for row in runs[f]["result"]] for f in (False, True))
    assert a == pytest.approx(b, abs=1e-12)
    assert not (tmp_path / "rounds" / "range").exists()  # each run's caches are removed after it
