"""Models built by ``posviz train`` go through their own positional code (the family's hook)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from posviz.cli.app import app
from posviz.errors import OptionError
from posviz.extract.registry import open_heads

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from posviz.models import PosvizAlbertConfig, PosvizForMaskedLM

    made = {}
    for scheme in ("absolute", "tisa", "tupe-r"):
        cfg = PosvizAlbertConfig(vocab_size=50, embedding_size=8, hidden_size=16, num_hidden_layers=2,
                                 num_attention_heads=2, intermediate_size=32, max_position_embeddings=24,
                                 position_scheme=scheme)
        folder = tmp_path_factory.mktemp(scheme) / "model"
        PosvizForMaskedLM(cfg).save_pretrained(folder)
        made[scheme] = folder
    return made


@pytest.mark.parametrize("scheme", ["absolute", "tisa", "tupe-r"])
def test_scores_are_those_of_the_models_own_positional_scores(trained, scheme):
    from posviz.models import positional_scores
    from posviz.toeplitz import score

    r = CliRunner().invoke(app, ["heads", str(trained[scheme]), "--layers", "all", "-f", "json", "--ln", "ln+type0"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert [(x["layer"], x["head"]) for x in rows] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for layer in (0, 1):
        ref = positional_scores(str(trained[scheme]), layer=layer, convention="ln+type0")
        ours = [x["toeplitzness"] for x in rows if x["layer"] == layer]
        np.testing.assert_allclose(ours, score(ref).toeplitzness, rtol=1e-9, atol=1e-9)  # R² in [0, 1]
    assert all(x["position_scheme"] == scheme and "positional_scores" in x["computed_by"] for x in rows)
    if scheme == "tisa":
        assert all(x["toeplitzness"] == 1.0 for x in rows)
    if scheme == "absolute":
        assert all(np.isfinite(x["null_mean"]) and x["ln"] == "ln+type0" for x in rows)


def test_options_that_do_not_apply_are_refused(trained):
    with pytest.raises(OptionError, match="--no-bias"):
        open_heads(str(trained["absolute"]), bias=False)
    with pytest.raises(OptionError, match="0:B"):
        open_heads(str(trained["tisa"]), positions="3:10")
    heads = open_heads(str(trained["tisa"]), positions="0:10")
    assert heads.layer(1).n == 10 and heads.conventions(1)["shared_across_layers"]
