"""One model load per session: a model loaded for one measure is handed to the next measure that runs it.

A report runs each model for its text measures (attention, hidden states and the registry's others, in one pass:
:mod:`posviz.observe.text_pass`) and, with ``--extrapolate-lengths``, for its loss at several lengths
(:mod:`posviz.extrapolation`), which needs the model's language-model head. Inside :func:`shared_models`,
:func:`posviz.observe.loading.load_model` keeps what it loads and hands it to the next call for the same model, device
and attention implementation:

* a call with a head gets the model loaded with that head;
* a call without one gets the bare model, or the base of a model loaded with a head (``model.base_model``, the module
  ``AutoModel`` would have built, on the same weights).

So a session that will score logits passes ``head_for``: the first, bare load of a model is then made with its head,
and the text measures run its base. A call with a config edit (a RoPE-scaling variant) is a different model and is
never shared. Models are kept until the session ends: open one session per model where several are measured in turn.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

#: ``(spec, device, device_map, attn_implementation)``: what makes two loads the same model.
Key = tuple[str, "str | None", "str | None", "str | None"]


@dataclass
class Weights:
    """A model as :func:`posviz.observe.loading.load_model` loaded it: in eval mode, on its device.

    Attributes
    ----------
    model
        The module loaded (with ``head``, or bare; the encoder alone for encoder-decoder models).
    head
        The language-model head it was loaded with (a key of :data:`posviz.observe.loading.HEADS`), or ``None``.
    missing_keys
        With a head: the parameters the checkpoint did not hold.
    """

    model: Any
    head: str | None
    missing_keys: tuple[str, ...] = ()

    def serves(self, head: str | None) -> bool:
        """Whether a call for ``head`` (``None``: the bare model) can run this model."""
        return head is None or head == self.head

    def module(self, head: str | None) -> Any:
        """The module a call for ``head`` runs: the model itself, or its base for a bare call on a model with a head."""
        return self.model if head is not None or self.head is None else self.model.base_model


@dataclass
class Session:
    """The models kept by one :func:`shared_models` block.

    Attributes
    ----------
    head_for
        ``head_for(config_dict)``: the head to load a model with when it is first asked for bare (``None``: bare).
    kept
        The loaded models, by :data:`Key`.
    loads
        Models loaded in the session (a model handed on is not counted again).
    """

    head_for: Callable[[dict[str, Any]], str | None] | None = None
    kept: dict[Key, Weights] = field(default_factory=dict)
    loads: int = 0


_SESSION: list[Session] = []


def current() -> Session | None:
    """The innermost open session, or ``None`` outside :func:`shared_models`."""
    return _SESSION[-1] if _SESSION else None


@contextlib.contextmanager
def shared_models(head_for: Callable[[dict[str, Any]], str | None] | None = None) -> Iterator[Session]:
    """A block inside which each model is loaded once (module docstring); the models are released at its end.

    Parameters
    ----------
    head_for
        Given a model's config as a dict, the head to load it with when its first load asks for none (a session
        that will also score the model's logits: :func:`posviz.extrapolation.objective.lm_head`).

    Examples
    --------
    >>> with shared_models(head_for=lm_head) as session:  # doctest: +SKIP
    ...     observe_text("gpt2", [AttentionRequest()], corpus="docs.txt")
    ...     extrapolate("gpt2", lengths="256,1024")
    >>> session.loads  # doctest: +SKIP
    1
    """
    session = Session(head_for)
    _SESSION.append(session)
    try:
        yield session
    finally:
        _SESSION.remove(session)
        session.kept.clear()


def shared_load(key: Key, head: str | None, config: dict[str, Any], load: Callable[[str | None], Weights]) -> Weights:
    """The model for ``key`` and ``head``: the session's when it has one that serves, else ``load(head to load)``.

    Outside a session this is ``load(head)``. Inside one, a bare call loads the head ``head_for`` chooses, and what is
    loaded replaces what the session kept for ``key``.
    """
    session = current()
    if session is None:
        return load(head)
    kept = session.kept.get(key)
    if kept is not None and kept.serves(head):
        return kept
    wanted = head if head is not None or session.head_for is None else session.head_for(config)
    weights = load(wanted)
    session.kept[key] = weights
    session.loads += 1
    return weights
