"""The causal LM, every scheme beyond the trained length, and eager attention against SDPA.

Checked against independent computations: the next-token loss written out as a shifted cross-entropy, transformers'
T5 decoder buckets, Press et al.'s causal ALiBi bias, the numpy T5 buckets of the actual length.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from posviz.models import SCHEMES, PosvizAlbertConfig, PosvizForCausalLM, PosvizForMaskedLM
from posviz.models.configuration_posviz import TABLE_SCHEMES

pytestmark = pytest.mark.usefixtures("one_thread")

MAX = 12
TINY = dict(vocab_size=61, embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=48, max_position_embeddings=MAX)


def tiny(scheme: str, causal: bool = False, **kw):
    torch.manual_seed(0)
    cfg = PosvizAlbertConfig(**{**TINY, "position_scheme": scheme, **kw})
    return (PosvizForCausalLM if causal else PosvizForMaskedLM)(cfg).eval()


def ids(b: int = 2, n: int = MAX, seed: int = 0) -> torch.Tensor:
    return torch.randint(5, 61, (b, n), generator=torch.Generator().manual_seed(seed))


# ---- the causal LM ------------------------------------------------------------------------------------------------
def test_causal_loss_is_the_shifted_cross_entropy_written_out():
    model = tiny("alibi", causal=True)
    x = ids(3)
    labels = x.clone()
    labels[:, 0] = -100
    labels[1, 7:] = -100  # e.g. padding: not scored
    with torch.no_grad():
        out = model(x, labels=labels)
        logp = torch.log_softmax(out.logits.double(), dim=-1)
    terms = [-float(logp[b, i, labels[b, i + 1]]) for b in range(3) for i in range(MAX - 1) if labels[b, i + 1] != -100]
    assert float(out.loss) == pytest.approx(np.mean(terms), rel=1e-5)
    with torch.no_grad():  # Trainer's num_items_in_batch: a sum over the batch divided by the count of the whole step
        summed = model(x, labels=labels, num_items_in_batch=torch.tensor(2 * len(terms))).loss
    assert float(summed) == pytest.approx(np.sum(terms) / (2 * len(terms)), rel=1e-5)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_causal_model_never_sees_later_tokens(scheme):
    model = tiny(scheme, causal=True, initializer_range=0.3)  # weights large enough that every token matters
    assert model.config.is_causal
    a, b = ids(1, seed=1), ids(1, seed=2)
    b[:, :5] = a[:, :5]  # same first five tokens, different rest
    mask = torch.ones(1, MAX, dtype=torch.long)
    with torch.no_grad():
        la, lb = model(a).logits, model(b, attention_mask=mask).logits
    torch.testing.assert_close(la[:, :5], lb[:, :5], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(la[:, 5:], lb[:, 5:], atol=1e-3)
    bidirectional = tiny(scheme, initializer_range=0.3)
    with torch.no_grad():
        assert not torch.allclose(bidirectional(a).logits[:, :5], bidirectional(b).logits[:, :5], atol=1e-4)


def test_causal_lm_round_trips_through_the_auto_class(tmp_path):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM

    model = tiny("rope", causal=True)
    model.save_pretrained(tmp_path)
    assert AutoConfig.from_pretrained(tmp_path).is_causal is True
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert type(loaded) is PosvizForCausalLM
    as_mlm = AutoModelForMaskedLM.from_pretrained(tmp_path).eval()  # same names: the masked-LM class reads it too
    x = ids()
    with torch.no_grad():
        want = model(x).logits
        torch.testing.assert_close(loaded(x).logits, want, rtol=0, atol=0)
        torch.testing.assert_close(as_mlm(x).logits, want, rtol=0, atol=0)  # the config's causal mask comes along
    assert set(model.state_dict()) == set(tiny("rope").state_dict())


def test_causal_t5_uses_the_decoder_buckets_of_transformers():
    from transformers.models.t5.modeling_t5 import T5Attention

    model = tiny("t5", causal=True, relative_attention_num_buckets=8, relative_attention_max_distance=10)
    module = model.albert.encoder.position_scores[0]
    assert module.bidirectional is False
    for n in (MAX, 3 * MAX):  # also past the trained length
        k = torch.arange(1 - n, n)
        want = T5Attention._relative_position_bucket(k, bidirectional=False, num_buckets=8, max_distance=10)
        weight = module.relative_attention_bias.weight.detach()
        with torch.no_grad():
            torch.testing.assert_close(module.offsets(n), weight[want].T, rtol=0, atol=0)
    assert tiny("t5").albert.encoder.position_scores[0].bidirectional is True


def test_causal_alibi_is_press_et_al():
    """Attention of a causal ALiBi model: softmax over j <= i of q k / sqrt(d) - m_h (i - j) (Press et al., 2022)."""
    from posviz.schemes.alibi import slopes

    model = tiny("alibi", causal=True, initializer_range=0.3, attn_implementation="eager")
    att = model.albert.encoder.albert_layer_groups[0].albert_layers[0].attention
    seen: dict[str, torch.Tensor] = {}
    att.register_forward_pre_hook(lambda m, a: seen.update(x=a[0]))
    att.attention_probs.register_forward_hook(lambda m, a, out: seen.update(p=out))
    with torch.no_grad():
        model(ids(1))
        q = att.query(seen["x"]).view(1, MAX, 4, 8).transpose(1, 2)
        k = att.key(seen["x"]).view(1, MAX, 4, 8).transpose(1, 2)
    i, j = np.arange(MAX)[:, None], np.arange(MAX)[None, :]
    bias = -slopes(4)[:, None, None] * (i - j)  # Press et al.: m * (j - i) on the keys j <= i
    logits = (q @ k.transpose(-1, -2)).double().numpy()[0] / np.sqrt(8) + bias
    logits = np.where(j <= i, logits, -np.inf)
    want = np.exp(logits - logits.max(-1, keepdims=True))
    want /= want.sum(-1, keepdims=True)
    np.testing.assert_allclose(seen["p"][0].double().numpy(), want, rtol=0, atol=2e-6)


# ---- lengths beyond the trained one --------------------------------------------------------------------------------
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("scheme", SCHEMES)
def test_every_scheme_runs_at_twice_the_trained_length_or_names_its_table(scheme, causal):
    model = tiny(scheme, causal)
    x = ids(2, 2 * MAX)
    if scheme in TABLE_SCHEMES:
        with pytest.raises(ValueError, match=f"sequence length {2 * MAX} exceeds max_position_embeddings {MAX}"):
            model(x)
        assert model.config.position_limit == MAX
        return
    assert model.config.position_limit is None
    with torch.no_grad():
        logits = model(x).logits
        assert logits.shape == (2, 2 * MAX, 61) and torch.isfinite(logits).all()
        # the first MAX positions are those of a sequence of the trained length, exactly when causal
        if causal:
            torch.testing.assert_close(logits[:, :MAX], model(x[:, :MAX]).logits, rtol=1e-5, atol=1e-5)
    if scheme == "t5":  # the buckets of the actual length, not a slice of the precomputed ones
        from posviz.schemes import t5

        module = model.albert.encoder.position_scores[0]
        want = t5.offset_buckets(2 * MAX, bidirectional=not causal)
        np.testing.assert_array_equal(module.offsets(2 * MAX).detach().numpy(),
                                      module.relative_attention_bias.weight.detach().numpy()[want].T)


def _peaked(scheme: str, causal: bool, eager: bool):
    return tiny(scheme, causal, initializer_range=0.3, attn_implementation="eager" if eager else "sdpa")


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("scheme", SCHEMES)
def test_eager_attention_equals_sdpa(scheme, causal):
    """The eager path (whose probabilities hooks read) applies RoPE, the tables and the masks as SDPA does."""
    sdpa, eager = _peaked(scheme, causal, False), _peaked(scheme, causal, True)
    n = MAX if scheme in TABLE_SCHEMES else 2 * MAX
    x = ids(3, n)
    mask = torch.ones(3, n, dtype=torch.long)
    mask[-1, n - 4:] = 0
    probs = []
    eager.albert.encoder.albert_layer_groups[0].albert_layers[0].attention.attention_probs.register_forward_hook(
        lambda m, a, out: probs.append(out))
    with torch.no_grad():
        for m in (None, mask):
            want = sdpa(x, attention_mask=m).logits
            torch.testing.assert_close(eager(x, attention_mask=m).logits, want, rtol=1e-4, atol=1e-4)
    p = probs[-1]
    assert float(p.max()) > 0.25  # far from uniform (1/n): masks and positions matter
    torch.testing.assert_close(p.sum(-1), torch.ones_like(p.sum(-1)))
    assert float(p[..., n - 4:][-1].abs().max()) == 0  # padded keys
    if causal:
        assert float(p.triu(1).abs().max()) == 0  # keys after the query
