"""PosvizForSequenceClassification: ALBERT's [CLS] head, regression, and loading a posviz train checkpoint."""

from __future__ import annotations

import pytest
import torch

from posviz.models import PosvizAlbertConfig, PosvizForSequenceClassification

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = dict(vocab_size=61, embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=48, max_position_embeddings=20)


def _batch(b: int = 4, n: int = 12):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 61, (b, n), generator=g)
    mask = torch.ones(b, n, dtype=torch.long)
    mask[-1, n - 4:] = 0
    return ids, mask


def test_absolute_scheme_reproduces_hf_albert_sequence_classification():
    """An AlbertForSequenceClassification state dict loads by name and gives the same logits and loss."""
    from transformers import AlbertConfig, AlbertForSequenceClassification

    torch.manual_seed(0)
    hf_cfg = AlbertConfig(**TINY, hidden_act="gelu_new", num_labels=3, hidden_dropout_prob=0.0,
                          attention_probs_dropout_prob=0.0, classifier_dropout_prob=0.0)
    hf = AlbertForSequenceClassification(hf_cfg).eval()
    cfg = PosvizAlbertConfig.from_albert(hf_cfg)
    cfg.num_labels = 3
    ours = PosvizForSequenceClassification(cfg).eval()
    result = ours.load_state_dict(hf.state_dict(), strict=True)
    assert not result.missing_keys and not result.unexpected_keys
    ids, mask = _batch()
    labels = torch.tensor([0, 2, 1, 2])
    with torch.no_grad():
        a = hf(input_ids=ids, attention_mask=mask, labels=labels)
        b = ours(input_ids=ids, attention_mask=mask, labels=labels)
    torch.testing.assert_close(b.logits, a.logits, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(b.loss, a.loss, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("scheme", ["tisa", "tupe-a", "none"])
def test_head_and_losses_match_an_independent_computation(scheme):
    """[CLS] → dense → tanh → linear, cross-entropy for classes and MSE for one output, written out here."""
    torch.manual_seed(0)
    for num_labels in (2, 1):
        model = PosvizForSequenceClassification(PosvizAlbertConfig(**TINY, position_scheme=scheme, num_labels=num_labels)).eval()
        ids, mask = _batch()
        labels = torch.tensor([0, 1, 1, 0]) if num_labels == 2 else torch.tensor([0.5, -1.0, 2.0, 0.0])
        with torch.no_grad():
            out = model(input_ids=ids, attention_mask=mask, labels=labels)
            cls = model.albert(ids, mask).last_hidden_state[:, 0]
            pooled = torch.tanh(cls @ model.albert.pooler.weight.T + model.albert.pooler.bias)
            logits = pooled @ model.classifier.weight.T + model.classifier.bias
        assert out.logits.shape == (4, num_labels)
        torch.testing.assert_close(out.logits, logits, atol=1e-6, rtol=1e-5)
        if num_labels == 2:
            expected = -torch.log_softmax(logits, -1)[torch.arange(4), labels].mean()
        else:
            expected = ((logits[:, 0] - labels) ** 2).mean()
        torch.testing.assert_close(out.loss, expected, atol=1e-6, rtol=1e-5)


def test_checkpoint_of_a_run_loads_its_encoder_and_a_new_head(absolute_run):
    """from_pretrained on a run's checkpoint keeps every encoder weight (bit for bit); only the head is new."""
    from safetensors.torch import load_file
    from transformers import AutoModelForSequenceClassification

    checkpoint = absolute_run / "checkpoint-12"
    saved = load_file(str(checkpoint / "model.safetensors"))
    model = AutoModelForSequenceClassification.from_pretrained(checkpoint, num_labels=2)
    assert isinstance(model, PosvizForSequenceClassification)
    state = model.state_dict()
    encoder = [k for k in saved if k.startswith("albert.")]
    assert len(encoder) > 10 and "albert.embeddings.position_embeddings.weight" in encoder
    for key in encoder:
        torch.testing.assert_close(state[key], saved[key], atol=0, rtol=0, msg=key)
    new = sorted(k for k in state if k not in saved)
    assert new == ["albert.pooler.bias", "albert.pooler.weight", "classifier.bias", "classifier.weight"]
    assert float(state["classifier.weight"].std()) == pytest.approx(model.config.initializer_range, rel=0.5)


@pytest.mark.parametrize("scheme", ["rope", "none", "alibi"])
def test_a_causal_model_is_classified_on_its_last_real_token(scheme):
    """Under the causal mask [CLS] sees only itself: the head reads the last non-padding token, as GPT-2's classifier."""
    torch.manual_seed(0)
    model = PosvizForSequenceClassification(PosvizAlbertConfig(**TINY, position_scheme=scheme, is_causal=True)).eval()
    ids, mask = _batch()
    with torch.no_grad():
        hidden = model.albert(ids, attention_mask=mask).last_hidden_state
        last = torch.tensor([11, 11, 11, 7])  # the last row is padded from position 8
        want = model.classifier(model.albert.pooler_activation(model.albert.pooler(hidden[torch.arange(4), last])))
        got = model(ids, attention_mask=mask).logits
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        # what follows the last real token (padding) changes nothing; without a mask the last position is read
        other = ids.clone()
        other[-1, 8:] = 0
        torch.testing.assert_close(model(other, attention_mask=mask).logits, got, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(model(ids[:3]).logits, got[:3], rtol=1e-5, atol=1e-6)
