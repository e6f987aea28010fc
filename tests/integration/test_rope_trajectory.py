"""``posviz trajectory ORG/NAME --revisions ... --measure bands``: RoPE band usage along a revision series.

The series lives on the local Hub emulator, Pythia-style (one repo, revisions step1000, step2000, ...). Its
checkpoints are tiny LLaMAs whose query weights are planted: at step 2000 only the high-frequency bands carry
energy, so the high-frequency share must go from about one half to exactly 1.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from posviz.cli.app import app
from tests.checkpoint_factory import build_tiny_checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")


def cli(*args: str):
    return CliRunner().invoke(app, list(args))


def _checkpoint(folder, seed: int, high_only: bool):
    """A tiny LLaMA (4 heads x 8 dims, bands 0-3 = rows b and b + 4 of each head); ``high_only`` zeroes bands 2-3."""
    wq = np.random.default_rng(seed).normal(size=(32, 32)).astype(np.float32)
    if high_only:
        rows = wq.reshape(4, 8, 32)
        rows[:, [2, 3, 6, 7]] = 0.0
    return build_tiny_checkpoint("llama", folder, seed=seed, plant={"layers.0.self_attn.q_proj.weight": wq})


@pytest.fixture
def series(fake_hub, tmp_path):
    for step, high_only in ((1000, False), (2000, True)):
        fake_hub.add("org/pythia-like", _checkpoint(tmp_path / f"s{step}", step, high_only), revision=f"step{step}")
    return fake_hub


def test_band_usage_along_revisions(series, tmp_path):
    fig = tmp_path / "bands.png"
    series.rendezvous = 2  # weight requests wait until two are open at once: the checkpoints are fetched together
    r = cli("trajectory", "org/pythia-like", "--revisions", "step1000,step2000", "--probe", "token:3",
            "--format", "json", "-o", str(fig), "-o", str(tmp_path / "rows.json"))
    assert r.exit_code == 0, r.output
    assert series.max_active >= 2
    series.rendezvous = 0
    rows = json.loads((tmp_path / "rows.json").read_text())
    assert [(x["step"], x["head"]) for x in rows] == [(s, h) for s in (1000, 2000) for h in range(4)]
    assert {x["series"] for x in rows} == {"org/pythia-like"} and {x["probe"] for x in rows} == {"token:3"}
    late = [x for x in rows if x["step"] == 2000]
    assert all(x["high_share"] == pytest.approx(1.0) and x["band_energy"][2] == x["band_energy"][3] == 0 for x in late)
    early = np.array([x["high_share"] for x in rows if x["step"] == 1000])
    assert np.all((early > 0.2) & (early < 0.8))
    # each row equals posviz heads on that revision
    heads = cli("heads", "org/pythia-like@step1000", "--probe", "token:3", "-f", "json")
    assert [x["band_energy"] for x in json.loads(heads.stdout)] == [x["band_energy"] for x in rows[:4]]
    assert fig.read_bytes()[:4] == b"\x89PNG"


def test_table_and_explicit_measures(series):
    r = cli("trajectory", "org/pythia-like", "--revisions", "step1000,step2000", "--measure", "bands", "--probe", "token:3")
    assert r.exit_code == 0, r.output
    assert "high-freq share" in r.stdout and "1.000 ± 0.000" in r.stdout
    wrong = cli("trajectory", "org/pythia-like", "--revisions", "step1000,step2000", "--measure", "toeplitzness")
    assert wrong.exit_code == 2 and "no learned absolute position embeddings" in wrong.output


def test_band_options_are_refused_for_toeplitzness(tiny_checkpoints):
    r = cli("trajectory", str(tiny_checkpoints("bert")), "--steps", "1", "--probe", "mean")
    assert r.exit_code == 2 and "--measure bands" in r.output
    bert = tiny_checkpoints("bert")
    r = cli("trajectory", str(bert), "--steps", "1", "--measure", "bands")  # no --probe given: the error must not name it
    (line,) = r.stderr.strip().splitlines()
    assert r.exit_code == 2 and line.startswith(f"error: {bert}: no RoPE band usage (learned absolute")
    assert line.endswith("(hint: --measure bands needs a RoPE model and a probe other than none)")


def test_a_hub_series_is_fetched_concurrently_with_the_same_rows(fake_hub, tmp_path, monkeypatch):
    """Several checkpoints in flight at once (the emulator holds weight requests until two are open), same rows
    as one after the other."""
    from tests.checkpoint_factory import TINY_CONFIGS

    ids = []
    for i in range(4):
        repo = f"org/series-seed_0-step_{i}k"
        fake_hub.add(repo, build_tiny_checkpoint("bert", tmp_path / f"c{i}", seed=i, **TINY_CONFIGS["bert"]))
        ids.append(repo)
    fake_hub.rendezvous = 2
    together = cli("trajectory", *ids, "--format", "json", "--no-cache", "--null-draws", "2")
    assert together.exit_code == 0, together.output
    assert fake_hub.max_active >= 2
    fake_hub.rendezvous, fake_hub.max_active = 0, 0
    monkeypatch.setenv("POSVIZ_FETCH_WORKERS", "1")
    monkeypatch.setenv("POSVIZ_CACHE_DIR", str(tmp_path / "fresh-cache"))
    apart = cli("trajectory", *ids, "--format", "json", "--no-cache", "--null-draws", "2")
    assert apart.exit_code == 0, apart.output
    assert json.loads(apart.stdout) == json.loads(together.stdout)
