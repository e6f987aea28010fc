"""Bases of a text measure that reads the hidden states only: its request and its observer, written once.

A measure of hidden states (``posviz hidden``, ``state-norms``, a plugin's) needs the same answers from the text pass:
nothing to refuse before the model loads, the model's default attention, one hidden state per block plus the
embedding output, and forward calls that return every hidden state (with an all-ones mask).

A measure of this kind writes its observer only: a subclass of :class:`HiddenStatesObserver` made as
``Observer(layers, n)`` (the chosen hidden-state indices, the block length), with ``after(ids, out)`` and
``finish(run)``. Its ``request`` is then ``hidden_states_request("NAME", Observer)``. A request with options of its own
(``posviz hidden``) subclasses :class:`HiddenStatesRequest` as a dataclass with ``layers``, ``name`` and
``observer(run, layers, batch_size)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


class HiddenStatesRequest:
    """A text measure's request that reads hidden states only (see the module docstring)."""

    def check(self) -> None:
        """Nothing to refuse before the model loads."""

    def needs_eager(self) -> bool:
        """Hidden states only: the model's default (SDPA) attention will do."""
        return False

    def layer_count(self, loaded: Any) -> int:
        """Hidden states of the model: the embedding output, then one per block."""
        return int(loaded.num_layers) + 1


@dataclass
class ObserveHiddenStates(HiddenStatesRequest):
    """The request of a measure whose observer is ``make(layers, n)``, for ``layers`` (0 = embedding output)."""

    name: str
    make: Callable[[list[int], int], Any] = field(repr=False)
    layers: Any = "all"

    def observer(self, run: Any, layers: list[int], batch_size: int) -> Any:
        """``make`` for the chosen ``layers`` and the length of ``run``'s blocks."""
        return self.make(layers, run.seq_len)


def hidden_states_request(name: str, make: Callable[[list[int], int], Any]) -> Callable[[Any], HiddenStatesRequest]:
    """A measure's ``request``: from posviz's series options, an :class:`ObserveHiddenStates` named ``name``.

    Parameters
    ----------
    name
        The measure's name (its registry key).
    make
        The observer's class (or any callable) taking the chosen hidden-state indices and the block length.

    Returns
    -------
    callable
        ``request(options)``; the measure uses ``options.layers`` (default every hidden state).
    """

    def request(options: Any) -> HiddenStatesRequest:
        return ObserveHiddenStates(name, make, options.layers or "all")

    request.__doc__ = f"The request of {name!r} in one text pass (it uses ``layers``; default all)."
    return request


class HiddenStatesObserver:
    """A text measure's observer that asks every forward call for the hidden states (see the module docstring)."""

    model: Any = None

    def forward_kwargs(self) -> dict[str, Any]:
        """Every hidden state, an all-ones attention mask, and no key/value cache where the model keeps one."""
        config = getattr(self.model, "config", None)
        return {"output_hidden_states": True, "attention_mask": True,
                **({"use_cache": False} if getattr(config, "use_cache", None) is not None else {})}

    def before(self, ids: Any) -> None:
        """Nothing before the forward call."""

    def close(self) -> None:
        """No hooks to remove."""
