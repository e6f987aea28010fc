"""Which median records a results table shows, and under which metric label."""

from __future__ import annotations

from posviz.finetuning.results import median_records, shown_medians


def seeds(source: str, step: int | None, task: str, metrics: dict[str, list[float]]) -> list[dict]:
    return [{"source": source, "step": step, "task": task, "seed": i, "metric": m, "value": v}
            for m, values in metrics.items() for i, v in enumerate(values)]


def test_one_metric_shares_its_row_with_score_others_keep_theirs():
    sst2 = seeds("b-run", 20, "glue/sst2", {"accuracy": [80.0, 90.0, 85.0], "score": [80.0, 90.0, 85.0]})
    mrpc = seeds("b-run", 20, "glue/mrpc", {"f1": [88.0, 86.0], "accuracy": [80.0, 82.0], "score": [84.0, 84.0]})
    early = seeds("b-run", 10, "glue/sst2", {"accuracy": [70.0], "score": [70.0]})
    other = seeds("a-run", None, "glue/sst2", {"accuracy": [60.0], "score": [60.0]})  # given after b-run: shown after it
    shown = shown_medians(median_records(sst2) + median_records(mrpc) + median_records(early) + median_records(other) + sst2)
    got = [(r["source"], r["step"], r["task"], label, r["value"]) for r, label in shown]
    assert got == [
        ("b-run", 10, "glue/sst2", "accuracy (= score)", 70.0),
        ("b-run", 20, "glue/mrpc", "accuracy", 81.0), ("b-run", 20, "glue/mrpc", "f1", 87.0), ("b-run", 20, "glue/mrpc", "score", 84.0),
        ("b-run", 20, "glue/sst2", "accuracy (= score)", 85.0),
        ("a-run", None, "glue/sst2", "accuracy (= score)", 60.0),
    ]


def test_a_score_that_differs_from_its_one_metric_keeps_its_row():
    odd = seeds("run", 5, "csv:x", {"accuracy": [50.0, 60.0], "score": [50.0, 70.0]})  # not written by posviz; shown as is
    assert [label for _, label in shown_medians(median_records(odd))] == ["accuracy", "score"]
