"""Relative schemes: T5 bucket bias, ALiBi, RoPE kernel, DeBERTa Gram, against transformers."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from transformers import AutoConfig, AutoModel  # noqa: E402

from posviz.errors import OptionError, UnsupportedModelError  # noqa: E402
from posviz.extract.registry import open_heads  # noqa: E402
from posviz.positional_scores import PositionalScores  # noqa: E402
from posviz.schemes import alibi, rope  # noqa: E402
from tests.checkpoint_factory import TINY_CONFIGS, rotary_inv_freq  # noqa: E402
from tests.reference import assert_close  # noqa: E402


def _save(model_type: str, folder, **cfg):
    torch.manual_seed(0)
    model = AutoModel.from_config(AutoConfig.for_model(model_type, **cfg))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "relative_attention_bias" in name or "rel_embeddings" in name:
                p.normal_(0, 1.0)  # make every bucket distinct
    model.save_pretrained(folder)
    return folder, model.double().eval()


# ---- T5 ---------------------------------------------------------------------
@pytest.mark.parametrize("side,n", [("encoder", 24), ("decoder", 24), ("encoder", 40)])
def test_t5_matrix_equals_hf_compute_bias(tmp_path, side, n):
    folder, model = _save("t5", tmp_path / "t5", **TINY_CONFIGS["t5"])
    heads = open_heads(str(folder), table=side, positions=f"0:{n}")
    attention = getattr(model, side).block[0].layer[0].SelfAttention
    with torch.no_grad():
        expected = attention.compute_bias(n, n)[0].numpy()  # (heads, query, key)
    for layer in range(heads.num_layers):  # T5 shares block 0's bias with every layer
        np.testing.assert_array_equal(heads.layer(layer).to_dense(), expected)
    _, scores = heads.score(1)
    assert np.all(scores.toeplitzness == 1.0) and np.all(scores.toeplitzness_offdiag == 1.0)
    conv = heads.conventions(1)
    assert conv["shared_across_layers"] and conv["bidirectional"] == (side == "encoder")


def test_umt5_has_one_bias_per_layer(tmp_path):
    folder, model = _save("umt5", tmp_path / "umt5", **TINY_CONFIGS["t5"])
    heads = open_heads(str(folder), positions="0:20")
    for layer in range(2):
        attention = model.encoder.block[layer].layer[0].SelfAttention
        with torch.no_grad():
            expected = attention.compute_bias(20, 20)[0].numpy()
        np.testing.assert_array_equal(heads.layer(layer).to_dense(), expected)
        assert not heads.conventions(layer)["shared_across_layers"]
    assert not np.array_equal(heads.layer(0).offsets, heads.layer(1).offsets)


def test_t5_rejects_an_unknown_table(tmp_path):
    folder, _ = _save("t5", tmp_path / "t5", **TINY_CONFIGS["t5"])
    with pytest.raises(OptionError, match="encoder or decoder"):
        open_heads(str(folder), table="middle")


# ---- ALiBi ------------------------------------------------------------------
@pytest.mark.parametrize("heads", [4, 8, 16])
def test_alibi_slopes_power_of_two_closed_form(heads):
    # Press et al. (2022): m_h = 2^(-8 h / H), h = 1..H
    expected = 2.0 ** (-8.0 * np.arange(1, heads + 1) / heads)
    np.testing.assert_allclose(alibi.slopes(heads), expected, rtol=1e-13)


@pytest.mark.parametrize("heads", [6, 12, 16])
def test_alibi_matrix_matches_hf_bloom_up_to_row_constants(heads):
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    n = 30
    ours = alibi.bias_offsets(alibi.slopes(heads), n)
    dense = np.stack([PositionalScores.from_offsets(ours).matrix(h) for h in range(heads)])
    hf = build_alibi_tensor(torch.ones(1, n), heads, torch.float64)[:, 0, :].numpy()  # (heads, key): m_h * j
    np.testing.assert_allclose(alibi.slopes(heads), hf[:, 1], rtol=1e-6)  # HF computes slopes in float32
    diff = dense - hf[:, None, :]
    causal = np.tri(n, dtype=bool)
    for h in range(heads):
        rows = [diff[h, i, causal[i]] for i in range(n)]
        assert all(np.ptp(r) < 1e-5 * n for r in rows)  # the same softmax on every key a query may see


def test_mpt_slopes_and_matrix_match_hf():
    from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

    n, heads = 25, 12
    assert alibi.slopes(16, kind="mpt")[0] == pytest.approx(2**-0.5, rel=1e-15)  # 1 / 2^(1 * 8 / 16)
    slopes = alibi.slopes(heads, kind="mpt", alibi_bias_max=8)
    hf = build_mpt_alibi_tensor(heads, n, 8)[:, 0, :].double().numpy()  # slope * (j - (n - 1))
    ours = np.stack([PositionalScores.from_offsets(alibi.bias_offsets(slopes, n)).matrix(h)[n - 1] for h in range(heads)])
    assert_close(ours, hf, rtol=1e-6)  # last query row: -m (n - 1 - j)


def test_bloom_model_heads_are_exactly_toeplitz(tiny_checkpoints):
    heads = open_heads(str(tiny_checkpoints("bloom")), positions="0:48")
    _, scores = heads.score(0)
    assert heads.num_heads == 4 and np.all(scores.toeplitzness == 1.0)
    conv = heads.conventions(0)
    assert conv["causal"] and len(conv["slopes"]) == 4
    assert_close(scores.profiles[1, :48], -conv["slopes"][1] * np.arange(47, -1, -1), rtol=1e-12)


# ---- RoPE -------------------------------------------------------------------
def test_rope_frequencies_match_llama(tmp_path):
    cfg = AutoConfig.for_model("llama", **{**TINY_CONFIGS["llama"], "rope_theta": 50000.0})
    spec = rope.rope_spec(cfg.to_dict())
    np.testing.assert_allclose(spec.inv_freq, rotary_inv_freq(cfg), rtol=1e-6)
    assert spec.theta == 50000.0 and spec.rotary_dim == 8


def test_rope_partial_rotary_matches_gpt_neox():
    cfg = AutoConfig.for_model(
        "gpt_neox", hidden_size=64, num_attention_heads=4, num_hidden_layers=2, intermediate_size=64,
        vocab_size=64, rotary_pct=0.25, rotary_emb_base=500000, bos_token_id=0, eos_token_id=0,
    )
    spec = rope.rope_spec(cfg.to_dict())
    assert spec.head_dim == 16 and spec.rotary_dim == 4 and spec.theta == 500000
    np.testing.assert_allclose(spec.inv_freq, rotary_inv_freq(cfg), rtol=1e-6)


def test_rope_llama3_scaling_goes_through_hf():
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 32}
    cfg = AutoConfig.for_model("llama", **{**TINY_CONFIGS["llama"], "rope_scaling": scaling})
    spec = rope.rope_spec(cfg.to_dict())
    assert spec.rope_type == "llama3"
    np.testing.assert_allclose(spec.inv_freq, rotary_inv_freq(cfg), rtol=1e-6)


def test_rope_gptj_rotary_dim_matches_hf_tables():
    from transformers.models.gptj.modeling_gptj import create_sinusoidal_positions

    spec = rope.rope_spec({"model_type": "gptj", "n_embd": 32, "n_head": 4, "rotary_dim": 4})
    table = create_sinusoidal_positions(10, 4).double().numpy()  # [sin | cos] of p * theta_i
    np.testing.assert_allclose(np.cos(np.arange(10)[:, None] * spec.inv_freq), table[:, 2:], atol=1e-6)


def test_rope_kernel_is_the_logit_of_rotated_constant_vectors():
    """q_i . k_j for constant (all-ones) q and k rotated as GPT-NeoX rotates them: HF's frequencies and rotate_half."""
    from transformers.models.gpt_neox.modeling_gpt_neox import rotate_half

    cfg = AutoConfig.for_model(
        "gpt_neox", hidden_size=64, num_attention_heads=4, num_hidden_layers=2, intermediate_size=64,
        vocab_size=64, rotary_pct=0.5, bos_token_id=0, eos_token_id=0,
    )
    spec = rope.rope_spec(cfg.to_dict())
    n = 33
    # cos/sin as every transformers release builds them (its apply_rotary_pos_emb's signature changed in 5)
    angles = torch.outer(torch.arange(n, dtype=torch.float64), torch.from_numpy(rotary_inv_freq(cfg)))
    cos, sin = torch.cat([angles, angles], dim=-1).cos(), torch.cat([angles, angles], dim=-1).sin()
    x = torch.ones(n, spec.rotary_dim, dtype=torch.float64)
    q = x * cos + rotate_half(x) * sin
    logits = (q @ q.T).numpy()  # each rotated pair (1, 1) has |pair|^2 = 2
    kernel = PositionalScores.from_offsets(rope.kernel_offsets(spec.inv_freq, n)).matrix(0)
    np.testing.assert_allclose(logits, 2 * kernel, atol=1e-5)


def test_rope_model_heads_are_exactly_toeplitz(tiny_checkpoints):
    heads = open_heads(str(tiny_checkpoints("llama")), positions="0:100", probe="content-free")
    _, scores = heads.score(1)
    assert np.all(scores.toeplitzness == 1.0) and np.all(np.isnan(scores.null_mean))
    assert scores.profiles[0, 99] == pytest.approx(4.0)  # k = 0: one cos(0) per rotated pair (8 dims)


def test_rope_dense_kernel_matches_closed_form():
    f = rope.kernel_offsets(1.0 / 10000 ** (np.arange(0, 16, 2) / 16), 12)
    i, j = np.indices((12, 12))
    dense = np.cos((j - i)[..., None] * (1.0 / 10000 ** (np.arange(0, 16, 2) / 16))).sum(-1)
    assert_close(PositionalScores.from_offsets(f).matrix(0), dense, rtol=1e-12)


# ---- DeBERTa ----------------------------------------------------------------
DEBERTA = dict(hidden_size=32, num_attention_heads=4, num_hidden_layers=2, intermediate_size=64, vocab_size=64,
               relative_attention=True, position_buckets=8, norm_rel_ebd="layer_norm", max_relative_positions=-1,
               max_position_embeddings=64, position_biased_input=False, pos_att_type=["p2c", "c2p"])


@pytest.mark.parametrize("ln", ["ln", "none"])
def test_deberta_gram_matches_hf_rel_embeddings(tmp_path, ln):
    folder, model = _save("deberta-v2", tmp_path / "deberta", **DEBERTA)
    heads = open_heads(str(folder), ln=ln)
    with torch.no_grad():
        r = (model.encoder.get_rel_embedding() if ln == "ln" else model.encoder.rel_embeddings.weight)[:16].numpy()
    stack = heads.layer(0)
    assert heads.num_heads == 1 and stack.n == 16
    np.testing.assert_allclose(stack.matrix(0), r @ r.T, rtol=1e-9, atol=1e-12)
    _, scores = heads.score(1)
    assert 0.0 <= scores.toeplitzness[0] <= 1.0 and np.isfinite(scores.null_mean[0])
    with pytest.raises(OptionError, match="does not apply to DeBERTa"):
        open_heads(str(folder), positions="0:8")


def test_mpt_without_alibi_is_refused(tmp_path):
    folder, _ = _save("mpt", tmp_path / "mpt", d_model=32, n_heads=4, n_layers=2, vocab_size=64,
                      attn_config={"alibi": False})
    with pytest.raises(UnsupportedModelError, match="does not use ALiBi"):
        open_heads(str(folder))
