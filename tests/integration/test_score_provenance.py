"""A cached score is served offline only for the Hub endpoint, id and commit it was computed from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from posviz.cli.app import app
from posviz.scoring.batch import MissingModelsError, ModelRequest, score_models
from posviz.scoring.cache import ScoreCache, ScoreSettings, make_key

ROOT = Path(__file__).resolve().parents[2]
HUB = "https://huggingface.co"
MIRROR = "http://127.0.0.1:9"  # never contacted: every test here is offline
FOREIGN = 0.012345  # no real checkpoint scores this
C1, C2, C3 = "1" * 40, "2" * 40, "3" * 40


def _row(repo_id: str, value: float = FOREIGN) -> dict:
    return {"model": repo_id, "source": f"hub {repo_id}@x", "revision": "x", "toeplitzness": value, "toeplitzness_offdiag": value}


def _plant(repo_id: str, commit: str, endpoint: str, value: float = FOREIGN) -> None:
    """A score entry written through the public cache API, as a scoring run against ``endpoint`` would."""
    assert ScoreCache().put(make_key(f"hub:{repo_id}", commit, ScoreSettings(), endpoint=endpoint), _row(repo_id, value))


def _score(spec: str, *aliases: str) -> dict:
    return score_models([ModelRequest(spec, aliases)], ScoreSettings(), cache=ScoreCache(), progress_label=None).rows[0]


@pytest.fixture
def offline(hf_cache, monkeypatch):
    """Offline, an empty HF cache, the default endpoint; returns the HF cache folder."""
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    return hf_cache.cache_dir


def _set_ref(hf_cache_dir: Path, repo_id: str, commit: str, ref: str = "main") -> None:
    """What the HF cache keeps of a download whose files were deleted since: the ref naming its commit."""
    refs = hf_cache_dir / ("models--" + repo_id.replace("/", "--")) / "refs"
    refs.mkdir(parents=True, exist_ok=True)
    (refs / ref).write_text(commit)


def test_an_entry_from_another_endpoint_is_not_served(offline, monkeypatch):
    _plant("org/m", C1, MIRROR)
    with pytest.raises(MissingModelsError, match="HF_HUB_OFFLINE is set"):
        _score("org/m")
    monkeypatch.setenv("HF_ENDPOINT", MIRROR + "/")  # the same endpoint, spelled differently
    row = _score("org/m")
    assert row["toeplitzness"] == FOREIGN and row["score_cache"] == "hit" and row["revision"] == C1
    assert row["source"] == f"hub org/m@{C1} from {MIRROR}"


def test_an_entry_from_the_hub_is_not_served_for_a_mirror(offline, monkeypatch):
    _plant("org/m", C1, HUB)
    row = _score("org/m")
    assert row["toeplitzness"] == FOREIGN and row["source"] == f"hub org/m@{C1}"  # the default endpoint is not named
    monkeypatch.setenv("HF_ENDPOINT", MIRROR)
    with pytest.raises(MissingModelsError):
        _score("org/m")


def test_the_commit_the_hf_cache_names_is_preferred(offline):
    _plant("org/m", C1, HUB, 0.1)
    _plant("org/m", C2, HUB, 0.2)  # newer
    assert _score("org/m")["revision"] == C2  # nothing known about the commit: the newest
    _set_ref(offline, "org/m", C1)
    row = _score("org/m")
    assert (row["revision"], row["toeplitzness"]) == (C1, 0.1)
    _set_ref(offline, "org/m", C3)  # the model moved on: neither entry is its score
    with pytest.raises(MissingModelsError):
        _score("org/m")


def test_the_commit_known_under_an_alias_holds_for_the_id(offline):
    _plant("albert/albert-base-v2", C1, HUB, 0.1)
    _plant("albert/albert-base-v2", C2, HUB, 0.2)
    _set_ref(offline, "albert-base-v2", C1)
    assert _score("albert/albert-base-v2", "albert-base-v2")["revision"] == C1


def test_revisions_in_the_spec(offline):
    _plant("org/m", C1, HUB, 0.1)
    _plant("org/m", C2, HUB, 0.2)
    assert _score(f"org/m@{C1}")["toeplitzness"] == 0.1
    with pytest.raises(MissingModelsError):
        _score(f"org/m@{C3}")
    with pytest.raises(MissingModelsError):  # a branch the HF cache cannot resolve matches nothing
        _score("org/m@dev")
    _set_ref(offline, "org/m", C1, "dev")
    assert _score("org/m@dev")["revision"] == C1


def test_cli_offline_with_only_a_foreign_entry_fails_clearly(offline):
    _plant("org/m", C1, MIRROR)
    r = CliRunner().invoke(app, ["toeplitzness", "org/m", "--format", "json"])
    assert r.exit_code == 2, r.output
    assert r.output.startswith("error: org/m: not in the local Hugging Face cache or the posviz score cache, and HF_HUB_OFFLINE is set")
    assert str(FOREIGN) not in r.output
    # The same as a process, with the endpoint given: the entry is served and its source says where it came from.
    env = {**os.environ, "HF_ENDPOINT": MIRROR}
    res = subprocess.run([sys.executable, "-m", "posviz", "toeplitzness", "org/m", "--format", "json"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    (row,) = json.loads(res.stdout)
    assert row["toeplitzness"] == FOREIGN and row["source"] == f"hub org/m@{C1} from {MIRROR}"
    assert "1 of 1 scores read from the posviz score cache" in res.stderr
    del env["HF_ENDPOINT"]
    res = subprocess.run([sys.executable, "-m", "posviz", "toeplitzness", "org/m"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and res.stderr.startswith("error: org/m: not in")


def test_a_score_from_a_local_hub_stays_with_that_hub(fake_hub, tiny_checkpoints, monkeypatch, tmp_path):
    """Scored online through a real HTTP server, then offline with the HF cache gone."""
    commit = fake_hub.add("org/tiny-gpt2", tiny_checkpoints("gpt2"))
    first = _score("org/tiny-gpt2")
    assert first["score_cache"] == "stored" and first["revision"] == commit
    assert first["source"] == f"hub org/tiny-gpt2@{commit} from {fake_hub.endpoint}"

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "fresh-hf-cache"))
    again = _score("org/tiny-gpt2")
    assert again["score_cache"] == "hit" and again["toeplitzness"] == first["toeplitzness"] and again["source"] == first["source"]
    monkeypatch.delenv("HF_ENDPOINT")
    with pytest.raises(MissingModelsError):
        _score("org/tiny-gpt2")
