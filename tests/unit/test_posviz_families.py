"""Checkpoints of posviz models work with the analysis commands like any other model."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from posviz.cli.app import app
from posviz.extract import posviz_trained
from posviz.extract.registry import scheme_for
from posviz.models import PosvizAlbertConfig, PosvizForMaskedLM, position_table
from posviz.read.embeddings import load_position_embeddings
from posviz.read.families import family_for_config
from posviz.toeplitz import score_embeddings

TINY = dict(vocab_size=50, embedding_size=8, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=32, max_position_embeddings=24)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    out = {}
    for scheme in ("absolute", "tisa", "tupe-r", "none"):
        torch.manual_seed(0)
        model = PosvizForMaskedLM(PosvizAlbertConfig(**TINY, position_scheme=scheme))
        folder = tmp_path_factory.mktemp(scheme.replace("+", "-"))
        model.save_pretrained(folder)
        out[scheme] = (folder, model)
    return out


def test_family_depends_on_the_scheme():
    assert family_for_config({"model_type": "posviz-albert", "position_scheme": "absolute"}).scheme == "learned"
    assert family_for_config({"model_type": "posviz-albert", "position_scheme": "tisa"}).scheme == "relative"
    tupe = family_for_config({"model_type": "posviz-albert", "position_scheme": "tupe-a"})
    assert tupe.row_offset({}) == 1 and tupe.tables[0].suffix.startswith("encoder.position_scores.0.")
    for scheme in ("absolute", "tisa", "tupe-a", "t5", "none"):  # analysed by the model's own positional code
        config = {"model_type": "posviz-albert", "position_scheme": scheme}
        assert scheme_for(family_for_config(config), config).open is posviz_trained.open_heads


@pytest.mark.parametrize("scheme", ["absolute", "tupe-r"])
def test_position_table_reads_as_e_p(saved, scheme):
    folder, model = saved[scheme]
    pe = load_position_embeddings(str(folder))
    want = position_table(model)
    assert pe.matrix.shape == (24, 16 if scheme == "tupe-r" else 8)
    np.testing.assert_array_equal(pe.matrix, want)
    if scheme == "tupe-r":  # row 0 of the stored table is the [CLS]->others vector, not a position
        stored = model.albert.encoder.position_scores[0].position_embeddings.weight.detach().double().numpy()
        np.testing.assert_array_equal(pe.matrix, stored[1:])


def test_toeplitzness_command_on_a_posviz_checkpoint(saved):
    folder, model = saved["absolute"]
    res = CliRunner().invoke(app, ["toeplitzness", str(folder), "--format", "json", "--null-draws", "3"])
    assert res.exit_code == 0, res.output
    import json

    row = json.loads(res.stdout)[0]
    e = model.albert.embeddings.position_embeddings.weight.detach().double().numpy()
    assert row["toeplitzness"] == pytest.approx(score_embeddings(e, null_draws=0).toeplitzness, rel=1e-9, abs=1e-9)


def test_heatmap_of_tupe_checkpoint_and_one_line_error_for_tisa(saved, tmp_path):
    png = tmp_path / "tupe.png"
    res = CliRunner().invoke(app, ["heatmap", str(saved["tupe-r"][0]), "-o", str(png)])
    assert res.exit_code == 0, res.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bad = tmp_path / "tisa.png"
    res = CliRunner().invoke(app, ["heatmap", str(saved["tisa"][0]), "-o", str(bad)])
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "TISA" in lines[0] and "posviz heads" in lines[0]
    assert not bad.exists()
