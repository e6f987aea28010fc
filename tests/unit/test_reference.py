"""The bundled reference tables equal the published ones.

The two tables below are transcribed independently of the package data, from the
google-research/albert README ("v2 vs v1") and from Table 3 of Wennberg & Henter
(ACL 2021), in the layout those sources use.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

import pytest

from posviz.reference import METRICS, albert_results, tisa_glue

ALBERT_TABLE = """
| version | size | Average | SQuAD1.1 | SQuAD2.0 | MNLI | SST-2 | RACE |
|---|---|---|---|---|---|---|---|
| v2 | base | 82.3 | 90.2/83.2 | 82.1/79.3 | 84.6 | 92.9 | 66.8 |
| v2 | large | 85.7 | 91.8/85.2 | 84.9/81.8 | 86.5 | 94.9 | 75.2 |
| v2 | xlarge | 87.9 | 92.9/86.4 | 87.9/84.1 | 87.9 | 95.4 | 80.7 |
| v2 | xxlarge | 90.9 | 94.6/89.1 | 89.8/86.9 | 90.6 | 96.8 | 86.8 |
| v1 | base | 80.1 | 89.3/82.3 | 80.0/77.1 | 81.6 | 90.3 | 64.0 |
| v1 | large | 82.4 | 90.6/83.9 | 82.3/79.4 | 83.5 | 91.7 | 68.5 |
| v1 | xlarge | 85.5 | 92.5/86.1 | 86.1/83.1 | 86.4 | 92.4 | 74.8 |
| v1 | xxlarge | 91.0 | 94.8/89.3 | 90.2/87.4 | 90.8 | 96.9 | 86.5 |
"""

TISA_TABLE = """
| task | (a) baseline | S=1 | S=3 | S=5 | (b) baseline | S=1 | S=3 | S=5 |
|---|---|---|---|---|---|---|---|---|
| SST-2 | 92.9 | 93.3 | 93.1 | 93.1 | 85.1 | 85.9 | 85.8 | 86.0 |
| MNLI | 83.8 | 84.1 | 84.4 | 84.8 | 78.8 | 80.9 | 81.4 | 81.6 |
| QQP | 88.2 | 88.0 | 88.3 | 88.3 | 86.3 | 86.2 | 86.5 | 86.8 |
| STS-B | 90.3 | 90.4 | 90.0 | 90.4 | 89.0 | 89.0 | 89.1 | 89.1 |
| CoLA | 57.2 | 57.0 | 56.5 | 58.5 | – | – | – | – |
| MRPC | 89.6 | 90.1 | 89.0 | 90.1 | 82.8 | 83.1 | 83.3 | 83.1 |
| QNLI | 91.6 | 91.7 | 91.4 | 91.6 | 86.6 | 87.2 | 87.4 | 87.7 |
| RTE | 72.9 | 71.1 | 73.6 | 73.6 | 62.1 | 61.7 | 62.5 | 62.8 |
"""


def _rows(markdown: str) -> list[list[str]]:
    lines = [ln.strip() for ln in markdown.strip().splitlines()]
    return [[c.strip() for c in ln.strip("|").split("|")] for ln in lines[2:]]


def _albert_reference() -> dict[tuple[str, str], dict[str, Decimal]]:
    out = {}
    for version, size, avg, sq1, sq2, mnli, sst2, race in _rows(ALBERT_TABLE):
        f1, em = sq1.split("/")
        f2, em2 = sq2.split("/")
        out[(version, size)] = {
            "average": Decimal(avg), "squad1_f1": Decimal(f1), "squad1_em": Decimal(em), "squad2_f1": Decimal(f2),
            "squad2_em": Decimal(em2), "mnli": Decimal(mnli), "sst2": Decimal(sst2), "race": Decimal(race),
        }
    return out


def test_albert_table_has_every_published_cell():
    ref = _albert_reference()
    df = albert_results()
    assert len(df) == 8 and len(ref) == 8
    assert set(zip(df["version"], df["size"], strict=True)) == set(ref)
    for _, row in df.iterrows():
        expected = ref[(row["version"], row["size"])]
        for col, value in expected.items():
            assert Decimal(str(row[col])) == value, (row["version"], row["size"], col)


@pytest.mark.parametrize("source", ["reference", "package"])
def test_every_average_is_rederived_from_its_columns(source):
    """Average = mean of five tasks, each SQuAD as (F1+EM)/2, rounded half up to 0.1."""
    if source == "reference":
        rows = list(_albert_reference().values())
    else:
        rows = [{k: Decimal(str(v)) for k, v in r.items() if k in ("average", "squad1_f1", "squad1_em", "squad2_f1", "squad2_em", "mnli", "sst2", "race")}
                for r in albert_results().to_dict(orient="records")]
    for r in rows:
        tasks = [(r["squad1_f1"] + r["squad1_em"]) / 2, (r["squad2_f1"] + r["squad2_em"]) / 2, r["mnli"], r["sst2"], r["race"]]
        mean = sum(tasks) / 5
        assert mean.quantize(Decimal("0.1"), rounding=ROUND_HALF_UP) == r["average"], r


def test_derived_squad_columns_and_metrics():
    df = albert_results()
    ref = _albert_reference()
    for _, row in df.iterrows():
        e = ref[(row["version"], row["size"])]
        assert Decimal(str(row["squad1"])) == (e["squad1_f1"] + e["squad1_em"]) / 2
        assert Decimal(str(row["squad2"])) == (e["squad2_f1"] + e["squad2_em"]) / 2
    assert list(METRICS) == ["average", "mnli", "sst2", "squad1", "squad2", "race"]
    assert all(name in df.columns for name in METRICS)


def test_hub_ids_canonical_and_alias():
    df = albert_results()
    for _, row in df.iterrows():
        assert row["alias"] == f"albert-{row['size']}-{row['version']}"
        assert row["hub_id"] == f"albert/{row['alias']}"
    arch = df.drop_duplicates("size").set_index("size")[["layers", "hidden", "heads"]]
    assert arch.loc["base"].tolist() == [12, 768, 12] and arch.loc["xxlarge"].tolist() == [12, 4096, 64]


def test_tisa_table_wide_and_tidy():
    wide = tisa_glue(wide=True).set_index("task")
    tidy = tisa_glue()
    columns = ["a_baseline", "a_s1", "a_s3", "a_s5", "b_baseline", "b_s1", "b_s3", "b_s5"]
    ref = _rows(TISA_TABLE)
    assert list(wide.index) == [r[0] for r in ref]
    n_cells = 0
    for task, *cells in ref:
        for col, cell in zip(columns, cells, strict=True):
            setting, kernels = col.split("_")
            k = 0 if kernels == "baseline" else int(kernels[1:])
            hit = tidy[(tidy["task"] == task) & (tidy["setting"] == setting) & (tidy["kernels"] == k)]
            if cell == "–":
                assert wide.loc[task, col] != wide.loc[task, col]  # NaN
                assert hit.empty
            else:
                assert Decimal(str(wide.loc[task, col])) == Decimal(cell), (task, col)
                assert len(hit) == 1 and Decimal(str(hit["score"].iloc[0])) == Decimal(cell)
                assert bool(hit["position_embeddings"].iloc[0]) is (setting == "a")
                n_cells += 1
    assert n_cells == len(tidy) == 60


def test_data_files_cite_their_sources():
    from importlib import resources

    albert = resources.files("posviz.reference").joinpath("albert_v1_v2.csv").read_text(encoding="utf-8")
    tisa = resources.files("posviz.reference").joinpath("tisa_glue.csv").read_text(encoding="utf-8")
    assert "google-research/albert" in albert and "v2 vs v1" in albert
    assert "2106.01950" in tisa and "Table 3" in tisa
