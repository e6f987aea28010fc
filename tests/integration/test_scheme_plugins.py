"""Schemes from other packages (the ``posviz.schemes`` entry-point group), through a real distribution: the worked
example ``examples/posviz-fire`` installed as a package on ``sys.path`` (its module and a ``.dist-info`` with its
entry points, as pip lays them out), then trained, saved, loaded and analysed by posviz with no change to posviz."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from posviz.cli.app import app
from tests.conftest import one_torch_thread
from tests.distributions import install as _install

pytestmark = pytest.mark.usefixtures("one_thread")
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "posviz-fire"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """A folder holding posviz-fire and a broken plugin distribution (its module does not exist)."""
    site = tmp_path_factory.mktemp("site-packages")
    _install(site, "posviz-fire", "[posviz.schemes]\nfire = posviz_fire:FireScores\n", EXAMPLE / "posviz_fire")
    _install(site, "posviz-broken", "[posviz.schemes]\nbroken = posviz_broken_scheme:Scores\n")
    return site


@pytest.fixture()
def installed(site, monkeypatch) -> Path:
    monkeypatch.syspath_prepend(str(site))
    return site


@pytest.fixture(scope="module")
def fire_run(site, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("fire") / "copy-fire"
    sys.path.insert(0, str(site))
    try:
        with one_torch_thread():
            res = CliRunner().invoke(app, ["train", "--task", "copy", "--scheme", "fire", "--train-length", "3", "--test-length", "6",
                                           "--examples", "32", "--steps", "6", "--eval-every", "3", "--batch-size", "8", "--out", str(out)])
    finally:
        sys.path.remove(str(site))
    assert res.exit_code == 0, res.output
    return out


def test_the_entry_point_is_discovered_in_a_fresh_interpreter(site):
    env = {**os.environ, "PYTHONPATH": str(site)}
    code = "import importlib.metadata as m; print(sorted(e.name for e in m.entry_points(group='posviz.schemes')))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['broken', 'fire']"
    code = "from posviz.schemes.modules.plugins import known_schemes; print(known_schemes()[-2:])"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "('broken', 'fire')"


def _fire(state: dict[str, np.ndarray], n: int) -> np.ndarray:
    """FIRE's scores from the saved tensors, in numpy (independent of the module): (heads, n, n)."""
    p = "albert.encoder.position_scores.0."
    c, threshold = np.exp(state[p + "log_c"]), np.exp(state[p + "log_threshold"])
    i = np.arange(n, dtype=np.float64)
    x = np.log(c * np.abs(i[:, None] - i[None, :]) + 1) / np.log(c * np.maximum(threshold, i) + 1)[:, None]
    hidden = np.maximum(x[..., None] * state[p + "mlp.0.weight"][:, 0] + state[p + "mlp.0.bias"], 0)
    return np.moveaxis(hidden @ state[p + "mlp.2.weight"].T + state[p + "mlp.2.bias"], -1, 0)


def test_a_plugin_scheme_trains_saves_and_is_read_back(fire_run, installed):
    from safetensors.numpy import load_file

    from posviz.models import positional_scores

    info = json.loads((fire_run / "run.json").read_text())
    assert info["scheme"] == "fire"
    state = {k: v.astype(np.float64) for k, v in load_file(str(fire_run / "checkpoint-6" / "model.safetensors")).items()}
    assert "albert.encoder.position_scores.0.log_threshold" in state
    scores = positional_scores(str(fire_run), layer=2, n=15)
    np.testing.assert_allclose(scores.dense, _fire(state, 15), rtol=1e-6, atol=1e-9)
    assert scores.meta["scheme"] == "fire" and scores.meta["shared_across_layers"]


def test_posviz_commands_read_a_plugin_run(fire_run, installed, corpus, tmp_path):
    run = str(fire_run)
    for args in (["heads", run, "--format", "json"],
                 ["attention", run, "--corpus", str(corpus), "--seq-len", "16", "--max-blocks", "2", "--format", "json"],
                 ["hidden", run, "--corpus", str(corpus), "--seq-len", "16", "--max-blocks", "2", "--format", "json"],
                 ["extrapolate", run, "--task", "copy", "--lengths", "2,6,9", "--examples", "4", "--format", "json"]):
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 0, (args[0], res.output)
        assert json.loads(res.stdout), args[0]
    records = json.loads(res.stdout)
    assert [r["length"] for r in records] == [2, 6, 9] and all(r["accuracy"] is not None for r in records)  # no table: any length


def test_a_plugin_that_fails_to_import_is_one_line(installed, tmp_path):
    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["train", "--task", "copy", "--scheme", "broken", "--out", str(out)])
    assert res.exit_code == 2, res.output
    line = res.output.strip()
    assert len(line.splitlines()) == 1 and "scheme plugin 'broken'" in line and "failed to import: ModuleNotFoundError" in line
    assert not out.exists()


def test_an_unknown_scheme_lists_the_installed_ones(installed, tmp_path):
    res = CliRunner().invoke(app, ["train", "--scheme", "kerple", "--out", str(tmp_path / "run")])
    assert res.exit_code == 2 and "unknown scheme 'kerple'" in res.output and "fire" in res.output
    assert len(res.output.strip().splitlines()) == 1
