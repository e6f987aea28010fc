"""scripts/long_context_tstl.py's rerun comparison: the checkpoint's bytes choose how closely a rerun must agree."""

from __future__ import annotations

import json
from pathlib import Path

from tests.script_runs import load_script

ROOT = Path(__file__).resolve().parents[2]


script = load_script(ROOT / "scripts" / "long_context_tstl.py", "posviz_long_context_tstl")


def _record(path: Path, sha: str, entropy: float) -> Path:
    path.write_text(json.dumps({"run": "rope-s0", "checkpoint_sha256": sha, "lengths": [{"length": 64, "entropy": entropy}]}))
    return path


def test_the_same_checkpoint_must_reproduce_to_1e5_and_a_retrained_one_to_1e3(tmp_path, capsys):
    shipped = _record(tmp_path / "shipped.json", "a" * 64, 0.5)
    moved = 0.5 * (1 + 2e-4)  # what a retrain on another machine moved (the shipped rope-s0: 2.3e-4 at most)
    assert script.compare(shipped, _record(tmp_path / "same.json", "a" * 64, moved)) == 1
    assert "the same bytes: tolerance 1e-05" in capsys.readouterr().out
    assert script.compare(shipped, _record(tmp_path / "retrained.json", "b" * 64, moved)) == 0
    assert "retrained (other bytes): tolerance 0.001" in capsys.readouterr().out
    assert script.compare(shipped, _record(tmp_path / "far.json", "b" * 64, 0.5 * (1 + 2e-3))) == 1  # beyond any rerun
    assert "lengths.0.entropy: 0.5 against" in capsys.readouterr().out
