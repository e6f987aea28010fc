"""The extract registry: which scheme opens which family, the HeadsSource protocol, conventions lines."""

from __future__ import annotations

import pytest

from posviz.errors import UnsupportedModelError
from posviz.extract.base import HeadsSource
from posviz.extract.registry import SCHEMES, convention_line, open_heads, scheme_for
from posviz.read.families import family_for_config

pytest.importorskip("torch")  # the tiny checkpoints are written with transformers


@pytest.mark.parametrize(
    ("config", "scheme"),
    [
        ({"model_type": "bert"}, "absolute"),
        ({"model_type": "bart"}, "absolute"),
        ({"model_type": "t5"}, "t5"),
        ({"model_type": "umt5"}, "t5"),
        ({"model_type": "bloom"}, "alibi"),
        ({"model_type": "mpt"}, "alibi"),
        ({"model_type": "falcon", "alibi": True}, "alibi"),
        ({"model_type": "falcon"}, "rope"),
        ({"model_type": "llama"}, "rope"),
        ({"model_type": "deberta-v2"}, "deberta"),
        ({"model_type": "posviz-albert", "position_scheme": "absolute"}, "posviz-trained"),
        ({"model_type": "posviz-albert", "position_scheme": "tupe-r"}, "posviz-trained"),
        ({"model_type": "posviz-albert", "position_scheme": "alibi"}, "posviz-trained"),
    ],
)
def test_each_family_is_claimed_by_one_scheme(config, scheme):
    family = family_for_config(config)
    assert scheme_for(family, config).name == scheme
    assert sum(s.claims(family, config) for s in SCHEMES) == 1


def test_a_family_no_scheme_claims_is_refused():
    config = {"model_type": "posviz-albert"}
    family = family_for_config(config)
    unclaimed = type(family)("made-up", ("made-up",), "relative")
    with pytest.raises(UnsupportedModelError, match="no per-head positional matrices for model_type 'posviz-albert'"):
        scheme_for(unclaimed, config)


# Conventions lines as the CLI and the report print them (pinned before the registry existed).
LINES = [
    ("bert", {}, 1, "input LN(E_P); LayerNorm embeddings.LayerNorm; Q/K biases on; scale 1/sqrt(8); rows 0-39 of 40"),
    ("albert", {"ln": "ln+type0"}, 1,
     "input LN(E_P + token_type[0]); LayerNorm embeddings.LayerNorm; mapped by encoder.embedding_hidden_mapping_in.weight "
     "(with bias); albert_layer_groups.0.albert_layers.0 (parameters shared across layers); Q/K biases on; scale 1/sqrt(8); "
     "rows 0-39 of 40"),
    ("gpt2", {"ln": "none"}, 1, "input raw E_P (no LayerNorm); Q/K biases on; scale 1/sqrt(8); rows 0-39 of 40"),
    ("t5", {"positions": "0:20"}, 1,
     "from encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight; bidirectional buckets: 8, max distance 16; "
     "same for every layer; scale 1 (T5 adds the bias to unscaled Q K^T); positions 0-19"),
    ("t5", {"positions": "0:20", "table": "decoder"}, 0,
     "from decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight; causal buckets: 8, max distance 16; "
     "same for every layer; scale 1 (T5 adds the bias to unscaled Q K^T); positions 0-19"),
    ("bloom", {"positions": "0:20"}, 0,
     "slopes from BLOOM's closed form (as transformers build_alibi_tensor); causal (k > 0 masked); same for every layer; "
     "scale 1 (the bias is added to the scaled Q K^T); positions 0-19"),
    ("llama", {"positions": "0:20", "probe": "content-free"}, 0,
     "rope default, theta 10000, 8 of 8 dims rotated; probe content-free (sum_b cos(k theta_b), no weights read); "
     "same for every layer; scale 1 (kernel before the model's 1/sqrt(d_h)); positions 0-19"),
    ("llama", {"positions": "0:20"}, 1,
     "rope default, theta 10000, 8 of 8 dims rotated; half pairing, 4 key/value heads; probe mean: mean of all 64 token "
     "embeddings (embed_tokens.weight), through the layer's input norm; scale 1/sqrt(d_h); positions 0-19"),
]


@pytest.mark.parametrize(("model_type", "options", "layer", "line"), LINES)
def test_conventions_lines_are_unchanged(tiny_checkpoints, model_type, options, layer, line):
    heads = open_heads(str(tiny_checkpoints(model_type)), **options)
    assert isinstance(heads, HeadsSource)
    stack = heads.layer(layer)
    assert stack.heads == heads.num_heads and stack.n == heads.n and stack.meta["layer"] == layer
    assert convention_line({**heads.conventions(layer), "rows_note": stack.meta.get("rows_note")}) == line


def test_a_posviz_model_is_opened_by_its_own_code_and_says_so(tmp_path):
    from posviz.models import PosvizAlbertConfig, PosvizForMaskedLM

    cfg = PosvizAlbertConfig(vocab_size=50, embedding_size=8, hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
                             intermediate_size=32, max_position_embeddings=40, position_scheme="absolute")
    PosvizForMaskedLM(cfg).save_pretrained(tmp_path)
    heads = open_heads(str(tmp_path), ln="ln")
    assert isinstance(heads, HeadsSource) and heads.metadata()["family"] == "posviz-albert (absolute)"
    line = convention_line({**heads.conventions(1), "rows_note": heads.layer(1).meta["rows_note"]})
    assert line == ("input LN(E_P); Q/K biases on; position scheme 'absolute' computed by "
                    "posviz.models.position_terms.positional_scores (the model's own positional code); layer group 0; "
                    "same for every layer; scale 1/sqrt(4); positions 0-39")
