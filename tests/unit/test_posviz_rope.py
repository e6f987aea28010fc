"""RoPE and the sinusoidal table in the posviz model, against independent computations.

RoPE: transformers' own rotary code (LLaMA's rotary embedding and ``apply_rotary_pos_emb``; partial rotary as
GPT-NeoX and Phi apply it). Sinusoidal: the formula of Vaswani et al. written out here in numpy.
"""

from __future__ import annotations

import inspect
import math

import numpy as np
import pytest
import torch

from posviz.models import PosvizAlbertConfig, PosvizForCausalLM, PosvizForMaskedLM, positional_scores
from posviz.schemes.modules.rope import RotaryEmbedding, apply_rotary
from posviz.schemes.modules.sinusoidal import SinusoidalPositions

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = dict(vocab_size=61, embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=48, max_position_embeddings=20)


def hf_rotary(head_dim: int, n: int, base: float, fraction: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin ``(1, n, d_rot)`` of transformers' rotary embedding: LLaMA's, or GPT-NeoX's for partial rotary."""
    from transformers import AutoConfig, AutoModel

    heads = 2
    common = dict(hidden_size=heads * head_dim, intermediate_size=16, num_hidden_layers=1, num_attention_heads=heads,
                  max_position_embeddings=n, vocab_size=8, bos_token_id=0, eos_token_id=0)
    if fraction == 1:
        cfg = AutoConfig.for_model("llama", **common, num_key_value_heads=heads, rope_theta=base)
    else:
        cfg = AutoConfig.for_model("gpt_neox", **common, rotary_pct=fraction, rotary_emb_base=base)
    rotary = next(m for m in AutoModel.from_config(cfg).modules() if hasattr(m, "inv_freq"))
    assert rotary.inv_freq.shape == (int(head_dim * fraction) // 2,)
    x = torch.zeros(1, n, head_dim)
    with torch.no_grad():
        if "position_ids" in inspect.signature(rotary.forward).parameters:
            cos, sin = rotary(x, torch.arange(n)[None])
        else:  # the older signature forward(x, seq_len): cached tables of shape (..., positions, d_rot), leading dims 1
            cos, sin = (t.reshape(-1, t.shape[-1])[:n][None] for t in rotary(x, seq_len=n))
    return cos, sin


def hf_rotate(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' ``apply_rotary_pos_emb`` on the first ``d_rot`` dims, the rest passed (GPT-NeoX's, Phi's partial rotary)."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    d_rot = cos.shape[-1]
    q_rot, k_rot = apply_rotary_pos_emb(q[..., :d_rot], k[..., :d_rot], cos, sin)
    return torch.cat([q_rot, q[..., d_rot:]], dim=-1), torch.cat([k_rot, k[..., d_rot:]], dim=-1)


@pytest.mark.parametrize(("base", "fraction"), [(10000.0, 1.0), (500.0, 1.0), (10000.0, 0.5), (20000.0, 0.25)])
def test_rotation_equals_transformers_rotary_code(base, fraction):
    head_dim, n = 16, 40
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 3, n, head_dim, generator=g), torch.randn(2, 3, n, head_dim, generator=g)
    cos, sin = hf_rotary(head_dim, n, base, fraction)
    want_q, want_k = hf_rotate(q, k, cos, sin)
    ours = RotaryEmbedding(int(head_dim * fraction), base)
    got_cos, got_sin = ours(n)
    torch.testing.assert_close(got_cos, cos[0], rtol=0, atol=2e-6)  # float32 angles; transformers: float32 too
    torch.testing.assert_close(got_sin, sin[0], rtol=0, atol=2e-6)
    torch.testing.assert_close(apply_rotary(q, got_cos, got_sin), want_q, rtol=0, atol=1e-5)
    torch.testing.assert_close(apply_rotary(k, got_cos, got_sin), want_k, rtol=0, atol=1e-5)
    if fraction < 1:
        torch.testing.assert_close(apply_rotary(q, got_cos, got_sin)[..., int(head_dim * fraction):], q[..., int(head_dim * fraction):],
                                   rtol=0, atol=0)


def test_partial_rotation_equals_gpt_neox_where_it_rotates_partially_itself():
    from transformers.models.gpt_neox import modeling_gpt_neox

    if "position_ids" in inspect.signature(modeling_gpt_neox.apply_rotary_pos_emb).parameters:
        pytest.skip("this transformers' GPT-NeoX slices the rotated dims in its attention, not in apply_rotary_pos_emb")
    head_dim, n = 16, 24
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(1, 2, n, head_dim, generator=g), torch.randn(1, 2, n, head_dim, generator=g)
    cos, sin = hf_rotary(head_dim, n, 10000.0, 0.25)
    want_q, want_k = modeling_gpt_neox.apply_rotary_pos_emb(q, k, cos, sin)
    got_cos, got_sin = RotaryEmbedding(4)(n)
    torch.testing.assert_close(apply_rotary(q, got_cos, got_sin), want_q, rtol=0, atol=1e-5)
    torch.testing.assert_close(apply_rotary(k, got_cos, got_sin), want_k, rtol=0, atol=1e-5)


def _layer0_attention(model, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The input of layer 0 and its attention probabilities (eager), read by hooks."""
    seen: dict[str, torch.Tensor] = {}
    att = model.albert.encoder.albert_layer_groups[0].albert_layers[0].attention
    hooks = [att.register_forward_pre_hook(lambda m, a: seen.update(x=a[0])),  # (update returns None: args kept)
             att.attention_probs.register_forward_hook(lambda m, a, out: seen.update(p=out))]
    try:
        with torch.no_grad():
            model(ids)
    finally:
        for h in hooks:
            h.remove()
    return seen["x"], seen["p"]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("fraction", [1.0, 0.5])
def test_rope_model_attention_is_transformers_rotary_attention(causal, fraction):
    torch.manual_seed(0)
    cfg = PosvizAlbertConfig(**TINY, position_scheme="rope", rope_theta=1000.0, partial_rotary_factor=fraction,
                             initializer_range=0.3, attn_implementation="eager")
    model = (PosvizForCausalLM if causal else PosvizForMaskedLM)(cfg).eval()
    n = 17
    ids = torch.randint(5, 61, (2, n), generator=torch.Generator().manual_seed(3))
    x, probs = _layer0_attention(model, ids)
    att = model.albert.encoder.albert_layer_groups[0].albert_layers[0].attention
    with torch.no_grad():
        q = att.query(x).view(2, n, 4, 8).transpose(1, 2)
        k = att.key(x).view(2, n, 4, 8).transpose(1, 2)
        q, k = hf_rotate(q, k, *hf_rotary(8, n, 1000.0, fraction))
        logits = q @ k.transpose(-1, -2) / math.sqrt(8)
        if causal:
            logits = logits.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
        want = torch.softmax(logits, dim=-1)
    assert float(want.max()) > 0.5  # peaked attention: the test can tell positions apart
    torch.testing.assert_close(probs, want, rtol=0, atol=2e-5)


def test_rope_has_no_parameters_and_the_state_dict_of_scheme_none():
    rope, none = PosvizForMaskedLM(PosvizAlbertConfig(**TINY, position_scheme="rope")), PosvizForMaskedLM(PosvizAlbertConfig(**TINY, position_scheme="none"))
    assert {k: v.shape for k, v in rope.state_dict().items()} == {k: v.shape for k, v in none.state_dict().items()}


def test_rope_config_needs_an_even_number_of_rotated_dims():
    with pytest.raises(ValueError, match="rotates 3 of the 8 dims"):
        PosvizAlbertConfig(**TINY, position_scheme="rope", partial_rotary_factor=0.4)
    with pytest.raises(ValueError, match="partial_rotary_factor must be above 0"):
        PosvizAlbertConfig(**TINY, position_scheme="rope", partial_rotary_factor=0.0)
    with pytest.raises(ValueError, match="rope_theta"):
        PosvizAlbertConfig(**TINY, position_scheme="rope", rope_theta=1.0)
    assert PosvizAlbertConfig(**TINY, position_scheme="rope", partial_rotary_factor=0.25).rotary_dim == 2


def test_rope_scores_point_to_the_band_analysis():
    from posviz.errors import UnsupportedModelError

    with pytest.raises(UnsupportedModelError, match="rotates queries and keys"):
        positional_scores(PosvizForMaskedLM(PosvizAlbertConfig(**TINY, position_scheme="rope")))


# ---- sinusoidal ---------------------------------------------------------------------------------------------------
def vaswani(n: int, d: int) -> np.ndarray:
    """PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(p / 10000^(2i/d)), element by element."""
    pe = np.zeros((n, d))
    for p in range(n):
        for i in range(d // 2):
            angle = p / 10000.0 ** (2 * i / d)
            pe[p, 2 * i], pe[p, 2 * i + 1] = math.sin(angle), math.cos(angle)
    return pe


@pytest.mark.parametrize("n", [1, 20, 57])
def test_sinusoidal_table_is_the_formula_at_any_length(n):
    table = SinusoidalPositions(16)(n, torch.device("cpu"), torch.float64)[0]
    np.testing.assert_allclose(table.numpy(), vaswani(n, 16), rtol=0, atol=1e-12)
    ids = torch.tensor([[3, 0, 7], [1, 2, 2]])
    np.testing.assert_allclose(SinusoidalPositions(16)(3, torch.device("cpu"), torch.float64, ids).numpy(), vaswani(8, 16)[ids.numpy()],
                               rtol=0, atol=1e-12)


def test_sinusoidal_model_adds_the_table_to_the_input_and_reports_it_as_e_p():
    from posviz.models import position_table

    torch.manual_seed(0)
    model = PosvizForMaskedLM(PosvizAlbertConfig(**TINY, position_scheme="sinusoidal")).eval()
    # scaled so its per-element RMS (1/sqrt(2) unscaled) is the word embeddings' initial std
    scale = model.config.sinusoidal_scale
    assert scale == pytest.approx(math.sqrt(2) * model.config.initializer_range)
    assert np.sqrt(np.mean((scale * vaswani(64, 16)) ** 2)) == pytest.approx(model.config.initializer_range, rel=0.01)
    emb = model.albert.embeddings
    ids = torch.randint(5, 61, (1, 30))  # longer than max_position_embeddings (20): no table bounds it
    with torch.no_grad():
        got = emb(ids)
        x = emb.word_embeddings(ids) + emb.token_type_embeddings.weight[0] + torch.from_numpy(scale * vaswani(30, 16)).float()
        want = emb.LayerNorm(x)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    assert not [name for name in model.state_dict() if "position" in name]  # nothing stored, nothing trained
    np.testing.assert_allclose(position_table(model), scale * vaswani(20, 16), rtol=0, atol=1e-12)
    # its per-head position-only logits: as for a learned table, from the fixed one
    scores = positional_scores(model, layer=1, convention="ln")
    enc, att = model.albert.encoder, model.albert.encoder.albert_layer_groups[0].albert_layers[0].attention
    with torch.no_grad():
        xp = enc.embedding_hidden_mapping_in(emb.LayerNorm(torch.from_numpy(scale * vaswani(20, 16)).float()))
        q, k = att.query(xp).view(20, 4, 8).transpose(0, 1), att.key(xp).view(20, 4, 8).transpose(0, 1)
        want_scores = (q @ k.transpose(1, 2) / math.sqrt(8)).double().numpy()
    assert scores.form == "factored" and scores.meta["scheme"] == "sinusoidal"
    np.testing.assert_allclose(scores.to_dense(), want_scores, rtol=1e-4, atol=1e-6)
