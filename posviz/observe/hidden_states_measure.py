"""Bases of a text measure that reads the hidden states only: its request and its observer, written once.

A measure of hidden states (``posviz hidden``, ``state-norms``, a plugin's) needs the same answers from the text pass:
nothing to refuse before the model loads, the model's default attention, one hidden state per block plus the
embedding output, and forward calls that return every hidden state (with an all-ones mask). Subclass
:class:`HiddenStatesRequest` as a dataclass with ``layers`` and ``name`` and an ``observer(run, layers,
batch_size)``; subclass :class:`HiddenStatesObserver` with ``after(ids, out)`` and ``finish(run)``.
"""

from __future__ import annotations

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
