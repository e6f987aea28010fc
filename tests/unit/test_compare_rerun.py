"""scripts/compare_rerun.py's record comparison: what a rerun must reproduce of a shipped record, and what it may add."""

from __future__ import annotations

import json
from pathlib import Path

from tests.script_runs import load_script

ROOT = Path(__file__).resolve().parents[2]


compare = load_script(ROOT / "scripts" / "compare_rerun.py", "posviz_compare_rerun")
SHIPPED = {"corpus_sha256": "ab" * 32, "extrapolate": [{"loss": 5.0, "tokens": 100, "heads": [{"entropy": 2.0}]}]}


def test_a_rerun_that_adds_a_measurement_still_reproduces_every_shipped_number():
    rerun = {"corpus_sha256": "ab" * 32, "extrapolate": [{"loss": 5.0000001, "tokens": 100, "heads": [{"entropy": 2.0}],
                                                          "loss_by_position": [5.1, 4.9]}]}
    worst, unequal = compare.record_differences(SHIPPED, rerun)
    assert unequal == [] and worst["loss"] < 1e-6 and worst["entropy"] == 0.0
    assert compare.new_in_rerun(SHIPPED, rerun) == ["loss_by_position"]


def test_a_shipped_number_the_rerun_lacks_or_changes_is_a_difference():
    rerun = {"corpus_sha256": "cd" * 32, "extrapolate": [{"loss": 5.0, "heads": [{"entropy": 2.0}]}]}
    _, unequal = compare.record_differences(SHIPPED, rerun)
    assert "extrapolate[0].tokens: only in the shipped record" in unequal
    assert any(line.startswith("corpus_sha256: shipped") for line in unequal)


def test_a_fine_tuning_score_five_examples_away_is_at_the_tolerance_not_beyond_it(tmp_path):
    """93.60000000000001 (the rerun) against 93.35 (shipped) is 5 of 2000 dev examples: 0.25 points, the default
    --finetune-atol, although the floats differ by 0.25000000000001."""
    def record(folder, seeds):
        path = folder / "finetune" / "step-2000" / "builtin-shuffled.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"records": [{"seed": k, "metric": "accuracy", "value": v} for k, v in seeds.items()]}))

    record(tmp_path / "shipped", {0: 93.35, 1: 92.85, 2: 93.30000000000001, "median": 93.30000000000001})
    record(tmp_path / "rerun", {0: 93.60000000000001})
    assert 93.60000000000001 - 93.35 > 0.25
    found = compare.finetune_differences(tmp_path / "shipped", tmp_path / "rerun")
    assert found == {"step-2000/builtin-shuffled seed 0 accuracy": (93.60000000000001, 0.25, 92.85, 93.35)}
