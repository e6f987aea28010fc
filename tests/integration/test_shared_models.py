"""One model load per session (posviz.observe.shared_models), on a real tiny GPT-2 with its language-model head.

Loads are counted where posviz reads a model from disk (``loading._load_weights``); the numbers of a session are
checked against the same measures run with no session, each on its own load.
"""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import numpy as np
import pytest

from posviz.observe import loading
from posviz.observe.shared_models import shared_models
from tests.checkpoint_factory import save_tiny_model

pytestmark = pytest.mark.usefixtures("one_thread")

L = 16


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory, tokenizer) -> Path:
    return save_tiny_model("gpt2", tmp_path_factory.mktemp("shared") / "gpt2", tokenizer=tokenizer, lm_head=True)


@pytest.fixture
def loads(monkeypatch) -> list[str | None]:
    """The head of every model read from disk, in order (``None``: bare)."""
    made: list[str | None] = []
    real = loading._load_weights

    def counted(*args, **kwargs):
        made.append(kwargs["head"])
        return real(*args, **kwargs)

    monkeypatch.setattr(loading, "_load_weights", counted)
    return made


def _frame_equal(a, b) -> None:
    fa, fb = a.to_frame(), b.to_frame()
    assert list(fa.columns) == list(fb.columns) and len(fa) == len(fb) > 0
    for column in fa.columns:
        if fa[column].dtype.kind == "f":
            np.testing.assert_allclose(fa[column].to_numpy(), fb[column].to_numpy(), rtol=1e-12, atol=0, equal_nan=True,
                                       err_msg=column)
        else:
            assert fa[column].tolist() == fb[column].tolist(), column


def test_a_session_loads_once_for_the_text_pass_and_the_loss(gpt2, corpus, loads):
    """The text pass's first, bare load is made with the causal-LM head (head_for); extrapolate then gets that model,
    and every number equals the same measures run apart, each on its own load."""
    from posviz.extrapolation.extrapolate import extrapolate
    from posviz.extrapolation.objective import lm_head
    from posviz.observe.attention_pass import AttentionRequest
    from posviz.observe.hidden_pass import HiddenRequest
    from posviz.observe.text_pass import observe_text

    def both():
        text = observe_text(str(gpt2), [AttentionRequest(layers="all"), HiddenRequest()], corpus=str(corpus), seq_len=L,
                            max_blocks=4)
        return text, extrapolate(str(gpt2), corpus=str(corpus), lengths=[L, 2 * L], max_blocks=2)

    with shared_models(head_for=lm_head) as session:
        text, extra = both()
    assert loads == ["causal-lm"] and session.loads == 1 and session.kept == {}
    assert all(r.loss is not None and r.loss > 0 for r in extra.runs)  # the head was there: a real loss
    alone_text, alone_extra = both()
    assert loads == ["causal-lm", None, "causal-lm"]
    _frame_equal(text["attention"], alone_text["attention"])
    _frame_equal(text["hidden"], alone_text["hidden"])
    _frame_equal(extra, alone_extra)


def test_a_bare_call_runs_the_base_of_the_kept_model(gpt2, loads):
    """Inside a session a bare call on a model kept with its head gets ``model.base_model``: the same module, the
    same parameters, the same outputs as ``AutoModel``."""
    import torch
    from transformers import AutoModel

    from posviz.extrapolation.objective import lm_head

    with shared_models(head_for=lm_head):
        bare = loading.load_model(str(gpt2), with_tokenizer=False, attn_implementation=None)
        headed = loading.load_model(str(gpt2), with_tokenizer=False, head="causal-lm", attn_implementation=None)
    assert loads == ["causal-lm"] and bare.missing_keys == () and headed.missing_keys == ()
    assert bare.model is headed.model.base_model and type(bare.model).__name__ == "GPT2Model"
    ids = torch.arange(1, L + 1)[None]
    reference = AutoModel.from_pretrained(gpt2).eval()
    with torch.no_grad():
        np.testing.assert_allclose(bare.model(ids).last_hidden_state.numpy(), reference(ids).last_hidden_state.numpy(),
                                   rtol=1e-6, atol=1e-6)


def test_what_a_session_does_not_share(gpt2, loads):
    """Outside a session every call loads; inside one, another attention implementation or a config edit is another
    model, a bare model does not serve a call for a head, and the session's models are freed at its end."""
    load = lambda **kw: loading.load_model(str(gpt2), with_tokenizer=False, **kw)  # noqa: E731
    first, second = load(attn_implementation=None), load(attn_implementation=None)
    assert loads == [None, None] and first.model is not second.model
    loads.clear()
    with shared_models() as session:
        bare = load(attn_implementation=None)
        assert load(attn_implementation=None).model is bare.model
        eager = load(attn_implementation="eager")
        edited = load(attn_implementation=None, config_edit=lambda config: setattr(config, "resid_pdrop", 0.0))
        headed = load(attn_implementation=None, head="causal-lm")
        assert load(attn_implementation=None).model is headed.model.base_model  # the newer load replaced the bare one
        kept = weakref.ref(headed.model)
    assert loads == [None, None, None, "causal-lm"] and session.loads == 3  # the edited model is not the session's
    assert len({id(m.model) for m in (bare, eager, edited)}) == 3
    del bare, eager, edited, headed
    gc.collect()
    assert kept() is None
