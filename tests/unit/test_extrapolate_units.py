"""``posviz extrapolate``'s parts on their own: lengths, RoPE-scaling options, the text budget and its windows, entropy sums."""

from __future__ import annotations

import numpy as np
import pytest

from posviz.errors import OptionError
from posviz.extrapolation.blocks import TextBudget, length_blocks
from posviz.extrapolation.extrapolate import parse_lengths
from posviz.extrapolation.scaling import RopeScaling, parse_scaling
from posviz.observe.lengths import is_rope


def test_parse_lengths():
    assert parse_lengths("256, 64,128,64") == [64, 128, 256]
    assert parse_lengths([512, 16]) == [16, 512]
    for bad in ("64,abc", "0", "1", "-64", "", "64,", "6.5", "64;128"):
        with pytest.raises(OptionError, match="is not a length"):
            parse_lengths(bad)


def test_parse_scaling():
    assert parse_scaling("yarn:4") == RopeScaling("yarn", 4.0) and parse_scaling("linear:2.5").label == "linear:2.5"
    for bad, fragment in (("linear", "TYPE:FACTOR"), ("linear:", "TYPE:FACTOR"), (":2", "TYPE:FACTOR"),
                          ("ntk:2", "unknown scaling type"), ("longrope:2", "unknown scaling type"),
                          ("linear:two", "not a number"), ("linear:0.5", "at least 1"), ("dynamic:nan", "at least 1"),
                          ("yarn:inf", "at least 1")):
        with pytest.raises(OptionError, match=fragment):
            parse_scaling(bad)


def test_a_type_the_installed_transformers_lacks_is_refused(monkeypatch):
    import posviz.util.compat_rope as compat

    monkeypatch.setattr(compat, "rope_scaling_types", lambda: frozenset({"linear", "dynamic"}))
    with pytest.raises(OptionError, match="does not implement it"):
        parse_scaling("llama3:8")
    assert parse_scaling("linear:2").type == "linear"


def test_scaling_parameters_and_both_config_spellings():
    from types import SimpleNamespace

    from posviz.util.compat_rope import set_rope_scaling

    llama3 = RopeScaling("llama3", 8).parameters(8192)
    assert llama3 == {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192,
                      "low_freq_factor": 1.0, "high_freq_factor": 4.0}
    assert RopeScaling("linear", 2).parameters(None) == {"rope_type": "linear", "factor": 2.0}
    v5 = SimpleNamespace(rope_parameters={"rope_type": "default", "rope_theta": 500000.0})  # transformers 5
    set_rope_scaling(v5, RopeScaling("yarn", 4).parameters(2048))
    assert v5.rope_parameters == {"rope_theta": 500000.0, "rope_type": "yarn", "factor": 4.0,
                                  "original_max_position_embeddings": 2048}
    v4 = SimpleNamespace(rope_scaling=None, rope_theta=10000.0)  # transformers 4.x: YaRN reads max_position_embeddings
    set_rope_scaling(v4, RopeScaling("yarn", 4).parameters(2048))
    assert v4.rope_scaling == {"rope_type": "yarn", "factor": 4.0} and v4.rope_theta == 10000.0


def test_is_rope():
    assert is_rope({"model_type": "llama"}) and is_rope({"model_type": "gpt_neox"})
    assert not is_rope({"model_type": "bert"}) and not is_rope({"model_type": "bloom"})
    assert not is_rope({"model_type": "posviz-albert", "position_scheme": "tisa"})
    assert is_rope({"model_type": "some-new-model", "rope_theta": 1e4}) and not is_rope({"model_type": "some-new-model"})


def _budget(tokens: int, prefix=(1,), suffix=(2,)) -> TextBudget:
    return TextBudget(tokens=np.arange(100, 100 + tokens), prefix=prefix, suffix=suffix, layout="", longest=0, blocks=0)


def test_blocks_cut_the_same_stream_at_every_length():
    budget = _budget(60)
    for n in (8, 12, 32):
        lb = length_blocks(budget, n, objective="causal")
        b = n - 2
        assert lb.inputs.shape == (60 // b, n) and (lb.inputs[:, 0] == 1).all() and (lb.inputs[:, -1] == 2).all()
        np.testing.assert_array_equal(lb.inputs[:, 1:-1].ravel(), np.arange(100, 100 + (60 // b) * b))
        assert lb.text_tokens == lb.tokens == (60 // b) * b  # every text token predicted, the specials never
        assert not lb.scored[:, [0, -1]].any()


def test_masks_depend_on_seed_length_and_window_only():
    budget = _budget(200)
    a = length_blocks(budget, 22, objective="masked", mask_id=9, seed=3)
    b = length_blocks(_budget(200, prefix=(5,), suffix=(6,)), 22, objective="masked", mask_id=7, seed=3)
    np.testing.assert_array_equal(a.scored, b.scored)  # another model's tokens: the same positions
    assert (a.scored.sum(axis=1) == 3).all() and not a.scored[:, [0, -1]].any()  # round(0.15 x 20) text positions
    assert (a.inputs[a.scored] == 9).all() and (a.inputs[~a.scored] == a.targets[~a.scored]).all()
    assert not np.array_equal(a.scored, length_blocks(budget, 22, objective="masked", mask_id=9, seed=4).scored)
    assert not np.array_equal(a.scored[0], a.scored[1])


def test_sliding_windows_score_each_token_once():
    lb = length_blocks(_budget(50, suffix=()), 11, objective="causal", stride=4)  # BOS layout: 10 text tokens a window
    starts = np.arange(0, 50 - 10 + 1, 4)
    assert len(lb.inputs) == len(starts) and lb.text_tokens == starts[-1] + 10
    scored_tokens = lb.targets[lb.scored]
    np.testing.assert_array_equal(np.sort(scored_tokens), np.arange(100, 100 + lb.text_tokens))
    masked = length_blocks(_budget(50, suffix=()), 11, objective="masked", stride=4, mask_id=0)
    assert (masked.scored.sum(axis=1)[1:] == 1).all()  # round(0.15 x 4) = 1 of the 4 new tokens of each later window
    assert not (masked.scored & ~lb.scored).any()


def test_bad_windows():
    with pytest.raises(OptionError, match="no position for text"):
        length_blocks(_budget(50), 2, objective="causal")
    with pytest.raises(OptionError, match="--stride 9"):
        length_blocks(_budget(50), 10, objective="causal", stride=9)
    with pytest.raises(OptionError, match="shorter than one window"):
        length_blocks(_budget(5), 10, objective="causal")


def test_row_sums_match_numpy():
    import torch

    from posviz.extrapolation.rows import RowSums

    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 3, 3, 6, 6)) * 3  # batches of (B, H, n, n)
    causal = np.tril(np.ones((6, 6), dtype=bool))
    probs = np.where(causal, np.exp(logits), 0.0)
    probs /= probs.sum(-1, keepdims=True)
    sums = RowSums([0])
    for batch in probs:
        sums.add(0, torch.as_tensor(batch, dtype=torch.float32))
    got = sums.layer(0, blocks=6, causal=True)
    p = probs.reshape(6, 3, 6, 6)
    with np.errstate(divide="ignore", invalid="ignore"):
        ent = -np.where(p > 0, p * np.log(p), 0.0).sum(-1)
    np.testing.assert_allclose(got.entropy, ent[:, :, 1:].mean(axis=(0, 2)), rtol=1e-6)
    np.testing.assert_allclose(got.entropy_normalised, (ent[:, :, 1:] / np.log(np.arange(2, 7))).mean(axis=(0, 2)), rtol=1e-6)
    np.testing.assert_allclose(got.max_weight, p.max(-1)[:, :, 1:].mean(axis=(0, 2)), rtol=1e-6)
    bidirectional = sums.layer(0, blocks=6, causal=False)  # the same sums, normalised by log n for every query
    np.testing.assert_allclose(bidirectional.entropy_normalised, got.entropy / np.log(6), rtol=1e-6)


def test_scaling_refused_without_transformers_rope():
    from posviz.extrapolation.scaling import check_scalable

    scaling = [RopeScaling("linear", 2)]
    check_scalable("m", {"model_type": "llama"}, scaling)
    check_scalable("m", {"model_type": "bert"}, [])
    with pytest.raises(OptionError, match="applies to RoPE models; m .model_type 'bert'"):
        check_scalable("m", {"model_type": "bert"}, scaling)
    with pytest.raises(OptionError, match="posviz train run"):
        check_scalable("m", {"model_type": "posviz-albert", "position_scheme": "tisa"}, scaling)


@pytest.mark.parametrize(("config", "expected"), [
    ({"model_type": "phi3", "original_max_position_embeddings": 4096, "max_position_embeddings": 131072}, 4096),  # top level
    ({"model_type": "llama", "max_position_embeddings": 131072,
      "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "original_max_position_embeddings": 8192}}, 8192),
    ({"model_type": "llama", "max_position_embeddings": 131072,
      "rope_parameters": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}, 32768),
    ({"model_type": "llama", "max_position_embeddings": 2048}, 2048),  # no scaling: the declared length
])
def test_training_length_reads_the_original_length_where_transformers_does(config, expected):
    from posviz.observe.lengths import training_length

    assert training_length(config, config["max_position_embeddings"]) == expected
