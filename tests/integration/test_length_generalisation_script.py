"""scripts/length_generalisation.py end to end at a toy budget: task runs trained and tested past their length, results
kept and resumed from, tables and the MRR ranking, and results made from other data or another budget refused."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.script_runs import run_script

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
TOY = ["--tasks", "parity", "--seeds", "0", "--schemes", "absolute", "alibi", "--steps", "4", "--eval-every", "2",
       "--batch-size", "8", "--examples", "6"]


def run(tmp_path: Path, *extra: str, toy: list[str] = TOY, in_process: bool = False) -> subprocess.CompletedProcess:
    """The script as a program (``in_process``: its ``main`` in this process, for runs that train nothing)."""
    return run_script(SCRIPTS / "length_generalisation.py",
                      ["--out", str(tmp_path / "runs"), "--results", str(tmp_path / "results"), *toy, *extra],
                      in_process=in_process)


def test_runs_are_tested_past_their_length_kept_and_tabulated(tmp_path):
    first = run(tmp_path, "--workers", "2", "--device", "cpu")  # two shards side by side, tables once both are done
    assert first.returncode == 0, first.stderr
    assert first.stderr.count("wrote") == 4  # table.md, table.json, figure.png, attention.png: by the parent only
    results = tmp_path / "results"
    assert sorted(p.name for p in (results / "runs").iterdir()) == ["parity-absolute-s0.json", "parity-alibi-s0.json"]
    assert not (tmp_path / "runs" / "parity-alibi-s0").exists()  # checkpoints deleted once the results are kept
    alibi = json.loads((results / "runs" / "parity-alibi-s0.json").read_text())
    assert [r["length"] for r in alibi["extrapolate"]] == [2, 4, 6, 8, 10, 12, 14, 16]
    assert all(r["train_length"] == 8 and r["accuracy"] is not None for r in alibi["extrapolate"])
    absolute = json.loads((results / "runs" / "parity-absolute-s0.json").read_text())
    assert absolute["test_data"]["sha256"] == alibi["test_data"]["sha256"]
    assert alibi["machine"]["device"].startswith("cpu") and alibi["machine"]["torch"]
    # the run is named, not the folder it ran in
    assert alibi["settings"]["out"] == "parity-alibi-s0" and str(tmp_path) not in json.dumps(alibi)
    assert {r["model"] for r in alibi["extrapolate"]} == {"run parity-alibi-s0, checkpoint-4 (step 4)"}
    # the offset profile looking back (distance 0, 1, ...), per length and layer
    profile = next(p for p in alibi["profiles"] if p["length"] == 16 and p["layer"] == 0)["by_distance"]
    tokens = next(r["positions"] for r in alibi["extrapolate"] if r["length"] == 16)
    assert len(profile) == tokens and all(w >= 0 for w in profile)
    table = json.loads((results / "table.json").read_text())
    assert {r["scheme"] for r in table["rows"]} == {"absolute", "alibi"} and (results / "figure.png").stat().st_size > 10_000
    # the pilot's budget: each run keeps its held-out evaluations, and the table the first step every seed learnt at
    assert [e["step"] for e in alibi["evaluations"]] == [0, 2, 4]
    for row in table["rows"]:
        reached = [e["step"] for e in (absolute if row["scheme"] == "absolute" else alibi)["evaluations"] if e["eval_exact_match"] >= 0.95]
        assert row["steps_to_learn"] == (reached[0] if reached else "not reached")
    assert "steps to learn" in (results / "table.md").read_text()
    picture = table["attention"]
    assert picture["task"] == "parity" and {picture["schemes"][w]["scheme"] for w in ("best", "worst")} <= {"absolute", "alibi"}
    assert (results / "attention.png").stat().st_size > 10_000 and table["machines"] == [alibi["machine"]]
    # resumes from the results alone; another budget is refused before anything trains
    again = run(tmp_path, in_process=True)
    assert again.returncode == 0 and "training" not in again.stderr
    other = run(tmp_path, "--steps", "6", "--eval-every", "3", toy=[a for a in TOY if a not in ("--steps", "4", "--eval-every", "2")],
                in_process=True)
    assert other.returncode != 0 and "steps" in other.stderr


def test_a_time_box_starts_no_run_after_it(tmp_path):
    done = run(tmp_path, "--stop-after", "0", in_process=True)
    assert done.returncode == 0, done.stderr
    assert "--stop-after 0 s reached, parity-absolute-s0 not started" in done.stderr
    assert not (tmp_path / "runs").exists() and not list((tmp_path / "results").glob("runs/*.json"))


def test_a_learning_rate_is_given_to_every_run_and_kept_in_the_budget(tmp_path):
    toy = ["--tasks", "parity", "--seeds", "0", "--schemes", "absolute", "--steps", "2", "--eval-every", "2", "--batch-size", "4",
           "--examples", "2", "--device", "cpu"]
    done = run(tmp_path, "--learning-rate", "0.002", toy=toy, in_process=True)
    assert done.returncode == 0, done.stderr
    record = json.loads((tmp_path / "results" / "runs" / "parity-absolute-s0.json").read_text())
    assert record["settings"]["learning_rate"] == 0.002
    assert json.loads((tmp_path / "results" / "experiment.json").read_text())["learning_rate"] == 0.002
    other = run(tmp_path, toy=toy, in_process=True)  # the size's own rate is another budget: refused
    assert other.returncode != 0 and "learning_rate" in other.stderr


def test_runs_from_other_data_are_refused(tmp_path):
    sys.path.insert(0, str(SCRIPTS))
    import length_generalisation as lg

    runs = tmp_path / "runs"
    runs.mkdir()
    base = {"settings": {"task": "copy", "task_data": {"train": {"sha256": "a"}}, "size": "tiny", "steps": 10, "batch_size": 8,
                         "train_length": 20}, "test_data": {"sha256": "t"}, "extrapolate": []}
    (runs / "copy-none-s0.json").write_text(json.dumps({**base, "run": "copy-none-s0"}))
    (runs / "copy-rope-s0.json").write_text(json.dumps({**base, "run": "copy-rope-s0", "test_data": {"sha256": "u"}}))
    with pytest.raises(SystemExit, match="differ in data or budget"):
        lg.load_runs(tmp_path)
    faster = {**base["settings"], "learning_rate": 0.002}  # the same data, another learning rate
    (runs / "copy-rope-s0.json").write_text(json.dumps({**base, "run": "copy-rope-s0", "settings": faster}))
    with pytest.raises(SystemExit, match="differ in data or budget"):
        lg.load_runs(tmp_path)


def _records(folder: Path, task: str, steps: int, beyond: dict[str, float], rate: float | None = None) -> None:
    """One run record per scheme (seed 0) of ``task`` at ``steps``, exact match 1.0 within and ``beyond[scheme]`` past."""
    (folder / "runs").mkdir(parents=True, exist_ok=True)
    for scheme, b in beyond.items():
        settings = {"task": task, "task_data": {"train": {"sha256": task}}, "size": "tiny", "steps": steps, "batch_size": 8,
                    "train_length": 8, **({} if rate is None else {"learning_rate": rate})}
        extrapolate = [{"length": 8, "train_length": 8, "accuracy": 1.0}, {"length": 16, "train_length": 8, "accuracy": b}]
        name = f"{task}-{scheme}-s0"
        (folder / "runs" / f"{name}.json").write_text(json.dumps({"run": name, "settings": settings, "test_data": {"sha256": "t"},
                                                                   "extrapolate": extrapolate}))


def test_a_task_is_tabulated_at_the_budget_its_pilot_found(tmp_path):
    """--task-results parity=PILOT: parity's runs come from the pilot's folder in place of the comparison's own (which
    did not learn it), the tables name its budget, and the MRR ranks it with the other learnt tasks."""
    sys.path.insert(0, str(SCRIPTS))
    import length_generalisation as lg

    main, pilot = tmp_path / "results", tmp_path / "results" / "pilot" / "parity-6000"
    _records(main, "copy", 3000, {"none": 0.5, "rope": 0.1})
    _records(main, "parity", 3000, {"none": 0.9, "rope": 0.9})
    (main / "runs" / "parity-rope-s0.json").write_text((main / "runs" / "parity-rope-s0.json").read_text().replace(
        '"accuracy": 1.0', '"accuracy": 0.6'))  # not learnt at the comparison's budget
    _records(pilot, "parity", 6000, {"none": 0.2, "rope": 0.8}, rate=5e-4)
    _records(pilot, "copy", 6000, {"none": 0.0, "rope": 0.0}, rate=5e-4)  # another task there: not taken
    runs, budgets = lg.gather_runs(main, {"parity": pilot})
    assert sorted(r["run"] for r in runs) == ["copy-none-s0", "copy-rope-s0", "parity-none-s0", "parity-rope-s0"]
    assert {r["settings"]["steps"] for r in runs if r["settings"]["task"] == "parity"} == {6000}
    assert budgets == {"copy": {"steps": 3000, "learning_rate": None, "results": "."},
                       "parity": {"steps": 6000, "learning_rate": 5e-4, "results": "pilot/parity-6000"}}
    rows, learnt = lg.summary(runs)
    assert learnt == {"copy": True, "parity": True}
    mrr = lg.mean_reciprocal_rank(rows, learnt)
    assert mrr == pytest.approx({"none": (1 + 1 / 2) / 2, "rope": (1 / 2 + 1) / 2})
    table = lg.markdown(rows, learnt, mrr, mrr, budgets)
    assert table.startswith("Budgets: parity from [pilot/parity-6000](pilot/parity-6000/table.md) (6000 steps, peak learning "
                            "rate 0.0005); the other tasks 3000 steps.")
    assert "| parity (1 seed; 6000 steps, peak learning rate 0.0005; chance 0.5) |" in table
    # without it, parity is the comparison's own and not learnt
    rows, learnt = lg.summary(lg.gather_runs(main, {})[0])
    assert learnt == {"copy": True, "parity": False}
    # per scheme: NoPE learnt the comparison's parity, the rotary (0.8 within on average) did not
    assert [(r["task"], r["scheme"], r["learnt"]) for r in rows] == [
        ("copy", "rope", True), ("copy", "none", True), ("parity", "rope", False), ("parity", "none", True)]
    # the threshold decides both: at 1.01 no scheme learnt anything, so no task is learnt
    rows, learnt = lg.summary(lg.gather_runs(main, {})[0], threshold=1.01)
    assert not any(r["learnt"] for r in rows) and learnt == {"copy": False, "parity": False}


def test_a_scheme_at_the_threshold_up_to_float_rounding_learnt_the_task():
    """Exact match 0.87, 0.99 and 0.99 at three lengths is 0.95 within (285 of 300 answers), whose float mean is
    0.9499999999999998: the table prints 0.950 and must not say that the scheme fell short of 0.95; 0.949 does."""
    sys.path.insert(0, str(SCRIPTS))
    import length_generalisation as lg

    def record(scheme: str, accuracies: list[float]) -> dict:
        extrapolate = [{"length": n, "train_length": 3, "accuracy": a} for n, a in zip([1, 2, 3, 6], [*accuracies, 0.0], strict=True)]
        evaluations = [{"step": 10, "eval_exact_match": float(np.mean(accuracies)), "eval_loss": 0.1}]
        return {"run": f"copy-{scheme}-s0", "settings": {"task": "copy"}, "extrapolate": extrapolate, "evaluations": evaluations}

    assert np.mean([0.87, 0.99, 0.99]) < 0.95  # the rounding this is about
    rows, learnt = lg.summary([record("rope", [0.87, 0.99, 0.99]), record("none", [0.87, 0.99, 0.987])])
    assert [(r["scheme"], r["learnt"], r["steps_to_learn"]) for r in rows] == [("rope", True, 10), ("none", False, "not reached")]
    assert learnt == {"copy": False}


@pytest.mark.parametrize(("pair", "says"), [("parity", "expected TASK=RESULTS"), ("lego=x", "expected TASK=RESULTS"),
                                            ("parity=nowhere", "holds no run of parity")])
def test_a_bad_task_results_pair_is_one_line_and_exit_2(tmp_path, pair, says):
    r = run(tmp_path, "--phase", "tabulate", "--task-results", pair, in_process=True)
    assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr


def test_mean_reciprocal_rank_as_kazemnejad_et_al():
    """Per learnt task and seed, 1 / rank by exact match beyond the trained length (ties share the better rank)."""
    sys.path.insert(0, str(SCRIPTS))
    import length_generalisation as lg

    rows = [{"task": "copy", "scheme": "none", "beyond_by_seed": [0.9, 0.2]},
            {"task": "copy", "scheme": "rope", "beyond_by_seed": [0.5, 0.2]},
            {"task": "copy", "scheme": "t5", "beyond_by_seed": [0.1, 0.6]},
            {"task": "parity", "scheme": "none", "beyond_by_seed": [0.0]}]
    mrr = lg.mean_reciprocal_rank(rows, {"copy": True, "parity": False})
    assert mrr == pytest.approx({"none": (1 + 1 / 2) / 2, "rope": (1 / 2 + 1 / 2) / 2, "t5": (1 / 3 + 1) / 2})
    # differences within the tie count as ties: seed 0, rope (0.5) ties with none (0.9), t5 (0.1) does not; seed 1, all tie
    tied = lg.mean_reciprocal_rank(rows, {"copy": True, "parity": False}, tie=0.45)
    assert tied == pytest.approx({"none": 1.0, "rope": 1.0, "t5": (1 / 2 + 1) / 2})


def test_mrr_table_is_ordered_by_the_ranking_with_ties():
    """A scheme ahead by a few answers where nobody generalises must not head the table: rows follow the MRR with ties."""
    sys.path.insert(0, str(SCRIPTS))
    import length_generalisation as lg

    # copy: nobody generalises, absolute is ahead by 0.01; sorting: t5 generalises, absolute sorts nothing
    rows = [{"task": t, "scheme": s, "seeds": 2, "within": 1.0, "within_min": 1.0, "learnt": True, "beyond": b,
             "beyond_by_seed": [b, b]}
            for t, s, b in (("copy", "absolute", 0.01), ("copy", "t5", 0.0), ("sorting", "absolute", 0.0), ("sorting", "t5", 0.04))]
    learnt = {"copy": True, "sorting": True}
    mrr, tied = lg.mean_reciprocal_rank(rows, learnt), lg.mean_reciprocal_rank(rows, learnt, 0.005)
    assert mrr["absolute"] == mrr["t5"] == 0.75 and tied == {"absolute": 0.75, "t5": 0.75}  # the rule: a tie
    tied = lg.mean_reciprocal_rank(rows, learnt, 0.02)
    assert tied["t5"] == 1.0 > tied["absolute"] == 0.75
    table = lg.markdown(rows, learnt, mrr, tied).splitlines()
    mrr_rows = table[table.index(next(line for line in table if line.startswith("| scheme | MRR"))) + 2:]
    assert [line.split(" | ")[0] for line in mrr_rows] == [f"| {lg.LABELS['t5']}", f"| {lg.LABELS['absolute']}"]
    assert mrr_rows[0].split(" | ")[1:3] == ["1.000", "0.750"]


def test_a_budget_where_no_task_is_learnt_gets_no_empty_ranking():
    """A pilot's table with no learnt task says so instead of printing a header with no columns and an empty MRR."""
    sys.path.insert(0, str(SCRIPTS))
    import length_generalisation as lg

    rows = [{"task": "copy", "scheme": s, "seeds": 1, "within": w, "within_min": w, "learnt": w >= 0.95, "beyond": 0.0,
             "beyond_by_seed": [0.0]} for s, w in (("none", 0.5), ("t5", 1.0))]
    table = lg.markdown(rows, {"copy": False}, {}, {})
    assert table.endswith("No task is learnt by every scheme in every seed: no ranking.\n")
    assert "| scheme |  |" not in table and "MRR" not in table and table.count("| copy |") == 2
    # a scheme that learnt it says so beside the task's "no": 1.000 next to a bare "no" read as a scheme that failed
    assert "| scheme learnt it (every seed ≥ 0.95 within) | task learnt (by every scheme) |" in table
    assert "| copy | T5 bias | 1 | 1.000 (1.000) | 0.000 | yes | no |" in table
    assert "| copy | none (NoPE) | 1 | 0.500 (0.500) | 0.000 | no | no |" in table
    # the header names the threshold the rows were judged at
    assert "| scheme learnt it (every seed ≥ 0.9 within) |" in lg.markdown(rows, {"copy": False}, {}, {}, threshold=0.9)


def test_compare_accepts_equal_answers_and_refuses_others(tmp_path):
    """--compare: 0 when every exact match agrees within --atol, 1 beyond it or when the data differ."""
    sys.path.insert(0, str(SCRIPTS))
    import length_generalisation as lg

    settings = {"size": "tiny", "steps": 10, "batch_size": 8, "seed": 0, "scheme": "none", "task": "copy", "train_length": 4,
                "task_data": {"train": {"sha256": "a"}}}

    def record(accuracy: list[float], data: str = "t") -> Path:
        path = tmp_path / f"{len(list(tmp_path.iterdir()))}.json"
        path.write_text(json.dumps({"run": "copy-none-s0", "settings": settings, "test_data": {"sha256": data}, "eval_loss": 0.1,
                                    "extrapolate": [{"length": n, "accuracy": a, "token_accuracy": a, "loss": 1.0}
                                                    for n, a in zip((2, 8), accuracy, strict=True)]}))
        return path

    shipped = record([1.0, 0.40])
    assert lg.compare_runs(shipped, record([1.0, 0.43]), atol=0.05) == 0
    assert lg.compare_runs(shipped, record([1.0, 0.50]), atol=0.05) == 1
    assert lg.compare_runs(shipped, record([1.0, 0.40], data="u"), atol=0.05) == 1


def test_steps_to_learn_rest_on_the_seeds_that_kept_their_evaluations():
    """Records made before runs kept their held-out evaluations count for nothing, and the table says on how many
    seeds the step rests; a seed that never reached the threshold makes it "not reached"."""
    sys.path.insert(0, str(SCRIPTS))
    import length_generalisation as lg

    def seed(*scores: float) -> dict:
        return {"evaluations": [{"step": 500 * i, "eval_exact_match": s, "eval_loss": 1.0} for i, s in enumerate(scores)]}

    old = {"run": "sorting-none-s0"}  # no evaluations kept
    assert lg.steps_to_learn([old], 0.95) == (None, 0)
    assert lg.steps_to_learn([old, seed(0.0, 0.96, 1.0), seed(0.0, 0.5, 0.97)], 0.95) == (1000, 2)
    assert lg.steps_to_learn([seed(0.0, 0.96), seed(0.0, 0.9)], 0.95) == ("not reached", 2)
    assert lg.step_cell({"seeds": 3, "steps_to_learn": 1000, "steps_to_learn_seeds": 2}) == "1000 (2 of 3 seeds)"
    assert lg.step_cell({"seeds": 2, "steps_to_learn": 1000}) == "1000" and lg.step_cell({"seeds": 1}) == "—"
