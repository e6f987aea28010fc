"""``offset-cosine``, a measure in its own folder: its FFT sums against the dense cosine matrices of the hidden states
that transformers' own model returns, and the measure through ``posviz measure`` as a user runs it."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from posviz.cli.app import app


def test_offset_cosines_equal_the_diagonals_of_the_dense_cosine_matrices(minilm_dir):
    import torch

    from posviz.measures import SeriesOptions, get_measure
    from posviz.observe.text_pass import observe_text
    from tests.reference import token_blocks_and_hf_hidden_states

    measure = get_measure("offset-cosine")
    ids, states = token_blocks_and_hf_hidden_states(minilm_dir)
    result = observe_text(str(minilm_dir), [measure.load("request")(SeriesOptions(layers="0,3,6"))], token_blocks=ids,
                          batch_size=2)["offset-cosine"]
    n = ids.shape[1]
    for row, layer in enumerate((0, 3, 6)):
        unit = torch.nn.functional.normalize(states[layer].double(), dim=-1)
        cos = (unit @ unit.transpose(1, 2)).numpy()  # (blocks, n, n): the dense reference
        dense = [np.mean([np.diagonal(c, k).mean() for c in cos]) for k in range(n)]
        np.testing.assert_allclose(result.cosine[row], dense, rtol=1e-9, atol=1e-12)
    last = result.records()[-1]
    assert last["layer"] == 6 and last["cos_16"] == pytest.approx(result.cosine[2, 16]) and "cos_32" not in last
    assert last["cos_far"] == pytest.approx(np.mean(result.cosine[2, 12:]))
    assert measure.load("values")(result) == {"cos_1": last["cos_1"], "cos_8": last["cos_8"], "cos_far": last["cos_far"]}


def test_posviz_measure_runs_it_from_its_registration(minilm_dir, tmp_path):
    """Nothing in posviz names it: ``posviz measure`` finds it in the registry, writes its records and draws its plot."""
    from posviz.measures import get_measure

    text = tmp_path / "docs.txt"
    text.write_text("\n\n".join(f"Paragraph {i} talks about positions, tokens and offsets at some length." * 3
                                for i in range(40)), encoding="utf-8")
    out = tmp_path / "cos.json"
    res = CliRunner().invoke(app, ["measure", "offset-cosine", str(minilm_dir), "--corpus", str(text), "--seq-len", "32",
                                   "--max-blocks", "4", "-o", str(out), "-o", str(tmp_path / "cos.png")])
    assert res.exit_code == 0, res.output
    records = json.loads(out.read_text(encoding="utf-8"))
    records = records.get("records", records) if isinstance(records, dict) else records
    assert [r["layer"] for r in records] == list(range(7)) and all(-1 <= r["cos_1"] <= 1 for r in records)
    assert (tmp_path / "cos.png").stat().st_size > 0 and get_measure("offset-cosine").origin == "posviz"
