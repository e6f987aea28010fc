"""Positional-scheme modules against their definitions and transformers' reference code."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from posviz.schemes.modules import AlibiScores, T5Scores, TisaScores, TupeScores
from posviz.toeplitz import toeplitz_projection, toeplitzness


def _is_toeplitz(a: np.ndarray) -> bool:
    return bool(np.array_equal(a[1:, 1:], a[:-1, :-1]))


# ---- TISA ---------------------------------------------------------------------------


@pytest.mark.parametrize(("heads", "kernels"), [(1, 1), (4, 3), (12, 5)])
def test_tisa_adds_three_parameters_per_kernel_and_head(heads, kernels):
    m = TisaScores(heads, kernels)
    assert sum(p.numel() for p in m.parameters()) == 3 * kernels * heads


def test_tisa_scores_are_exactly_toeplitz_and_match_the_formula():
    torch.manual_seed(0)
    m = TisaScores(3, 5).double()
    n = 17
    f = m(n).detach().numpy()
    a, b, c = (t.detach().numpy() for t in (m.a, m.b, m.c))
    for h in range(3):
        assert _is_toeplitz(f[h])
        np.testing.assert_allclose(toeplitz_projection(f[h]), f[h], rtol=1e-13, atol=1e-15)
        assert toeplitzness(f[h]) == pytest.approx(1.0, abs=1e-12)
        # independent evaluation of f(j - i) = sum_s a_s exp(-|b_s| (j - i - c_s)^2)
        for i, j in [(0, 0), (3, 9), (9, 3), (16, 0), (0, 16)]:
            k = j - i
            want = np.sum(a[h] * np.exp(-np.abs(b[h]) * (k - c[h]) ** 2))
            assert f[h, i, j] == pytest.approx(want, rel=1e-12, abs=1e-12 * np.abs(f[h]).max())


def test_tisa_kernel_with_offset_plus_three_peaks_three_keys_to_the_right():
    m = TisaScores(1, 1).double()
    with torch.no_grad():
        m.a.fill_(1.0)
        m.b.fill_(0.5)
        m.c.fill_(3.0)
    n = 12
    f = m(n).detach().numpy()[0]
    for i in range(n - 3):
        assert f[i].argmax() == i + 3  # F[i, i+3] = f(+3): key three positions after the query
        assert f[i, i + 3] == pytest.approx(1.0)
    assert f[5, 2] < f[2, 5]  # k = -3 is far from the kernel centre


def test_tisa_initialisation_uses_standard_deviations():
    torch.manual_seed(0)
    m = TisaScores(200, 50)  # 10,000 draws: standard errors 1e-4, 1e-4 and 0.05
    a, b, c = (t.detach().numpy().ravel() for t in (m.a, m.b, m.c))
    assert a.mean() == pytest.approx(0.1, abs=0.002) and a.std() == pytest.approx(0.01, rel=0.05)
    assert b.mean() == pytest.approx(0.1, abs=0.002) and b.std() == pytest.approx(0.01, rel=0.05)
    assert c.mean() == pytest.approx(0.0, abs=0.25) and c.std() == pytest.approx(5.0, rel=0.05)


# ---- T5 and ALiBi -------------------------------------------------------------------


def test_t5_scores_equal_transformers_t5_bias():
    from transformers import T5Config
    from transformers.models.t5.modeling_t5 import T5Attention

    cfg = T5Config(d_model=16, d_kv=4, num_heads=4, relative_attention_num_buckets=32, relative_attention_max_distance=128, is_decoder=False)
    ref = T5Attention(cfg, has_relative_attention_bias=True)
    ours = T5Scores(4, max_positions=300, num_buckets=32, max_distance=128)
    with torch.no_grad():
        ours.relative_attention_bias.weight.copy_(ref.relative_attention_bias.weight)
        want = ref.compute_bias(300, 300)[0]
        got = ours(300)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert _is_toeplitz(got[2].numpy())


def test_alibi_slopes_match_bloom_and_scores_are_minus_slope_times_distance():
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    for heads in (4, 8, 12):
        mask = torch.ones(1, 6)
        bloom = build_alibi_tensor(mask, heads, torch.float32)  # slope_h * position
        bloom_slopes = bloom[:, 0, 1]
        m = AlibiScores(heads)
        torch.testing.assert_close(m.slopes.float(), bloom_slopes)
        f = m(6)
        i, j = 1, 5
        torch.testing.assert_close(f[:, i, j], -m.slopes * abs(j - i))
        torch.testing.assert_close(f[:, j, i], f[:, i, j])


# ---- TUPE ---------------------------------------------------------------------------


def _tupe_reference(m: TupeScores, n: int) -> np.ndarray:
    """TUPE's positional term computed in numpy from the module's weights."""
    w = {k: v.detach().double().numpy() for k, v in m.state_dict().items()}
    p = w["position_embeddings.weight"][: n + 1]
    mu, var = p.mean(-1, keepdims=True), p.var(-1, keepdims=True)
    p = (p - mu) / np.sqrt(var + m.LayerNorm.eps) * w["LayerNorm.weight"] + w["LayerNorm.bias"]
    q = p @ w["query.weight"].T + w["query.bias"]
    k = p @ w["key.weight"].T + w["key.bias"]
    d = m.head_dim
    out = np.empty((m.heads, n, n))
    for h in range(m.heads):
        qh, kh = q[:, h * d : (h + 1) * d], k[:, h * d : (h + 1) * d]
        s = qh @ kh.T / np.sqrt(2 * d)  # rows/cols: [cls-vector, position 0, 1, ...]
        block = s[1:, 1:].copy()
        block[:, 0] = s[1, 1]  # others -> [CLS]: row-1 vector with itself
        block[0, :] = s[0, 0]  # [CLS] -> others: row-0 vector with itself
        out[h] = block
    return out


@pytest.mark.parametrize("relative", [False, True])
def test_tupe_term_matches_reference_and_unties_cls(relative):
    torch.manual_seed(1)
    m = TupeScores(32, 4, max_positions=40, relative=relative).double()
    n = 40
    got = m(n).detach().numpy()
    want = _tupe_reference(m, n)
    if relative:
        bias = m.relative_attention_bias.weight.detach().numpy()
        want = want + np.transpose(bias[m.bucket_ids[:n, :n].numpy()], (2, 0, 1))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    term = m.absolute_term(n).detach().numpy()
    for h in range(4):
        assert np.all(term[h, 0, :] == term[h, 0, 0])  # [CLS] -> others: one value per head
        assert np.all(term[h, 1:, 0] == term[h, 1, 0])  # others -> [CLS]: one value per head
        assert term[h, 0, 0] != term[h, 1, 0]


def test_tupe_r_buckets_are_t5_buckets_with_separate_cls_buckets():
    from transformers.models.t5.modeling_t5 import T5Attention

    n = 300
    ids = TupeScores.make_bucket_ids(n, 32, 128)
    pos = torch.arange(n)
    t5 = T5Attention._relative_position_bucket(pos[None, :] - pos[:, None], bidirectional=True, num_buckets=32, max_distance=128)
    assert torch.equal(ids[1:, 1:], t5[1:, 1:])
    assert torch.all(ids[0, :] == 16) and torch.all(ids[1:, 0] == 32)
    assert not torch.any(t5 == 16)  # the [CLS]->others bucket is one T5 never produces
    assert int(t5.max()) == 31


@pytest.mark.parametrize("scheme", ["absolute", "none", "tisa", "absolute+tisa", "tupe-a", "tupe-r", "t5", "alibi", "rope",
                                    "sinusoidal"])
def test_a_model_trains_after_an_evaluation_under_inference_mode(scheme):
    """The tables a scheme caches per length are normal tensors: an evaluation under ``torch.inference_mode`` (posviz
    extrapolate) followed by a training step at the same lengths (the next run of a script, in one process) works."""
    from posviz.models import PosvizAlbertConfig, PosvizForCausalLM

    torch.manual_seed(0)
    config = PosvizAlbertConfig(vocab_size=32, embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                intermediate_size=64, max_position_embeddings=16, position_scheme=scheme)
    model = PosvizForCausalLM(config)
    lengths = [12] if scheme.startswith("absolute") or scheme.startswith("tupe") else [12, 24]  # 24: past the trained length
    model.eval()
    with torch.inference_mode():
        for n in lengths:
            model(input_ids=torch.randint(0, 32, (2, n)))
    model.train()
    for n in lengths:
        ids = torch.randint(0, 32, (2, n))
        model(input_ids=ids, labels=ids).loss.backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
