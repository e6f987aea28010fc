"""Tiled statistics captured from real Hugging Face models running SDPA, against their eager attention maps.

Each tiny model (random weights, ``save_pretrained``-free: built from its config) runs twice on the same blocks:
with ``attn_implementation="eager"`` and ``output_attentions=True``, whose maps the dense statistics of
``posviz attention`` score, and inside :class:`~posviz.observe.tiled.capture.TiledCapture`, where the model keeps
SDPA and posviz sees only the queries and keys. The statistics agree to 1e-5 and the model's outputs are unchanged.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")
from posviz.observe.statistics import LayerSums  # noqa: E402
from posviz.observe.statistics import layer_statistics as dense_statistics  # noqa: E402
from posviz.observe.tiled import layer_statistics  # noqa: E402
from posviz.observe.tiled.capture import NotCapturable, TiledCapture, _interfaces  # noqa: E402
from posviz.observe.tiled.normalisers import flash_cpu  # noqa: E402


def _capturable() -> bool:
    try:
        _interfaces()
    except NotCapturable:
        return False
    return True


needs_interface = pytest.mark.skipif(not _capturable(), reason=f"transformers {transformers.__version__} has no AttentionInterface")


def _llama(**extra):
    return transformers.LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=8,
                                    num_key_value_heads=2, max_position_embeddings=128, **extra)


MODELS = {
    "llama-gqa-rope-linear": lambda: transformers.LlamaForCausalLM(_llama(rope_scaling={"rope_type": "linear", "factor": 2.0})),
    "llama-rope-yarn": lambda: transformers.LlamaForCausalLM(_llama(rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                                                                  "original_max_position_embeddings": 32})),
    "mistral-sliding-window": lambda: transformers.MistralForCausalLM(transformers.MistralConfig(
        vocab_size=64, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        sliding_window=16)),
    "gpt2": lambda: transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=4, n_positions=128)),
    "bert": lambda: transformers.BertForMaskedLM(transformers.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2,
                                                                          num_attention_heads=4, intermediate_size=64)),
}


def _dense_reference(model, ids):
    """Per layer, the eager attention maps in float64."""
    model.set_attn_implementation("eager")
    with torch.no_grad():
        out = model(ids, output_attentions=True)
    model.set_attn_implementation("sdpa")
    return [a.double() for a in out.attentions]


@needs_interface
@pytest.mark.parametrize("name", sorted(MODELS))
def test_captured_statistics_equal_those_of_the_eager_maps(name):
    torch.manual_seed(0)
    model = MODELS[name]().eval()
    model.set_attn_implementation("sdpa")
    ids = torch.randint(0, 64, (3, 40), generator=torch.Generator().manual_seed(1))
    maps = _dense_reference(model, ids)
    with torch.no_grad():
        plain = model(ids).logits
        with TiledCapture(model, tile=16) as capture:
            captured = model(ids).logits
    assert model.config._attn_implementation == "sdpa"
    torch.testing.assert_close(captured, plain, rtol=0, atol=0)
    assert sorted(capture.sums) == list(range(len(maps)))
    for layer, a in enumerate(maps):
        support = capture.supports[layer]
        st = layer_statistics(capture.sums[layer], support)
        mask = torch.as_tensor(support.dense())
        assert bool((a.sum(0)[:, ~mask] == 0).all()), "the captured support holds every key the eager maps attend to"
        if support.window is None:
            ref = dense_statistics(LayerSums(a.shape[0], a.sum(0).numpy(), (a * a).sum((0, 3)).numpy(),
                                             (a.sum(-1) ** 2).sum(0).numpy()), support.causal)
            for field in ("toeplitzness", "toeplitzness_offdiag", "null_mean", "positional_share", "positional_share_null",
                          "sink_mass"):
                np.testing.assert_allclose(getattr(st, field), getattr(ref, field), atol=1e-5, err_msg=f"{name} layer {layer} {field}")
        entropy = -(a * torch.log(a.clamp_min(1e-300))).sum(-1).mean(0)
        np.testing.assert_allclose(st.entropy, entropy[:, 1:].mean(-1).numpy(), atol=1e-5)
        np.testing.assert_allclose(st.max_weight, a.amax(-1).mean(0)[:, 1:].mean(-1).numpy(), atol=1e-5)
        np.testing.assert_allclose(st.received, (a.sum((0, 2)) / (a.shape[0] * mask.sum(0))).numpy(), atol=1e-5)
    expected = {"mistral-sliding-window": (True, 16), "bert": (False, None)}.get(name, (True, None))
    assert (capture.supports[0].causal, capture.supports[0].window) == expected
    # without a mask the model's SDPA is PyTorch's CPU flash kernel: every layer took its normalisers (one pass)
    one_pass = set() if name == "mistral-sliding-window" or flash_cpu() is None else set(range(len(maps)))
    assert capture.one_pass == one_pass


@needs_interface
def test_the_one_pass_and_the_two_give_the_same_sums():
    torch.manual_seed(0)
    model = MODELS["llama-gqa-rope-linear"]().eval()
    model.set_attn_implementation("sdpa")
    ids = torch.randint(0, 64, (2, 100), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        with TiledCapture(model, map_size=32) as one:
            model(ids)
        with TiledCapture(model, map_size=32, normalisers=False) as two:
            model(ids)
    assert two.one_pass == set() and one.one_pass == (set() if flash_cpu() is None else {0, 1})
    for layer in (0, 1):
        a, b = one.sums[layer].numpy(), two.sums[layer].numpy()
        assert a.pop("blocks") == b.pop("blocks") == 2
        for field in ("span50", "span90"):  # counts of queries: a query within float rounding of a threshold may move
            x, y = a.pop(field), b.pop(field)
            assert x.sum() == y.sum() and np.abs(x - y).sum() <= 4, field
        for field, value in a.items():
            np.testing.assert_allclose(value, b[field], rtol=1e-6, atol=1e-6, err_msg=field)


@needs_interface
def test_only_the_chosen_layers_are_kept_and_every_call_is_counted():
    model = MODELS["llama-gqa-rope-linear"]().eval()
    ids = torch.randint(0, 64, (2, 24), generator=torch.Generator().manual_seed(2))
    with torch.no_grad(), TiledCapture(model, layers=[1], tile=8) as capture:
        model(ids)
        model(ids)
    assert sorted(capture.sums) == [1] and capture.sums[1].blocks == 4 and capture.calls == 4


@needs_interface
def test_a_padded_batch_is_refused_with_its_reason():
    model = MODELS["llama-gqa-rope-linear"]().eval()
    ids = torch.randint(0, 64, (2, 24), generator=torch.Generator().manual_seed(3))
    padding = torch.ones_like(ids)
    padding[0, :5] = 0
    with torch.no_grad(), TiledCapture(model) as capture, pytest.raises(NotCapturable, match="padded"):
        model(ids, attention_mask=padding)
    assert capture.sums == {} and model.config._attn_implementation == "sdpa"


def test_a_model_outside_the_attention_interface_is_not_capturable():
    class Plain(torch.nn.Module):
        config = None

    with pytest.raises(NotCapturable):
        TiledCapture(Plain()).__enter__()


def _posviz(scheme: str, causal: bool):
    from posviz.models import PosvizAlbertConfig, PosvizForCausalLM, PosvizForMaskedLM

    config = PosvizAlbertConfig(vocab_size=64, embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                intermediate_size=48, max_position_embeddings=64, position_scheme=scheme,
                                num_hidden_groups=2 if scheme == "tisa" else 1)
    return (PosvizForCausalLM if causal else PosvizForMaskedLM)(config)


@needs_interface
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "masked"])
@pytest.mark.parametrize("scheme", ["absolute", "none", "tisa", "tupe-a", "tupe-r", "t5", "alibi", "rope", "sinusoidal"])
def test_posviz_models_hand_their_positional_terms_to_the_capture(scheme, causal):
    """posviz's own models route through the interface inside a capture: their scores (TISA, TUPE, T5, ALiBi) arrive as
    the position bias, RoPE rotated, TUPE's scale; every statistic equals that of their eager probabilities."""
    torch.manual_seed(0)
    model = _posviz(scheme, causal).eval()
    generator = torch.Generator().manual_seed(4)
    for name, p in model.named_parameters():
        # trained-looking positional terms, not their zero initialisation; queries and keys large enough that no head
        # is near uniform (where Toeplitzness, a ratio of tiny variances, amplifies float32 rounding beyond 1e-5)
        if "position_scores" in name or name.endswith(("query.weight", "key.weight")):
            p.data.normal_(0.0, 1.0 if "position_scores" in name else 0.3, generator=generator)
    ids = torch.randint(0, 64, (3, 40), generator=torch.Generator().manual_seed(1))
    probs: list[torch.Tensor] = []
    hooks = [m.register_forward_hook(lambda _m, _i, out: probs.append(out.double()))
             for name, m in model.named_modules() if name.endswith("attention.attention_probs")]
    model.config._attn_implementation = "eager"
    with torch.no_grad():
        eager = model(ids).logits
    for h in hooks:
        h.remove()
    model.config._attn_implementation = "sdpa"
    with torch.no_grad():
        plain = model(ids).logits
        with TiledCapture(model, tile=16) as capture:
            captured = model(ids).logits
    assert model.config._attn_implementation == "sdpa" and len(probs) == 2
    torch.testing.assert_close(captured, plain, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(captured, eager, rtol=1e-4, atol=1e-4)
    for layer, a in enumerate(probs):
        support = capture.supports[layer]
        assert support.causal == causal
        st = layer_statistics(capture.sums[layer], support)
        ref = dense_statistics(LayerSums(a.shape[0], a.sum(0).numpy(), (a * a).sum((0, 3)).numpy(), (a.sum(-1) ** 2).sum(0).numpy()),
                               causal)
        for field in ("toeplitzness", "toeplitzness_offdiag", "positional_share", "sink_mass"):
            np.testing.assert_allclose(getattr(st, field), getattr(ref, field), atol=1e-5, err_msg=f"{scheme} layer {layer} {field}")
        entropy = -(a * torch.log(a.clamp_min(1e-300))).sum(-1).mean(0)
        np.testing.assert_allclose(st.entropy, entropy[:, 1:].mean(-1).numpy(), atol=1e-5)


def test_a_padded_posviz_batch_is_refused_with_its_reason():
    model = _posviz("alibi", causal=True).eval()
    ids = torch.randint(0, 64, (2, 24), generator=torch.Generator().manual_seed(3))
    padding = torch.ones_like(ids)
    padding[0, -5:] = 0
    with torch.no_grad(), TiledCapture(model) as capture, pytest.raises(NotCapturable, match="padded"):
        model(ids, attention_mask=padding)
    assert capture.sums == {}
