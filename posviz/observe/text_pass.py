"""One forward pass over text for every text measure asked for: the model loaded once, the corpus cut once.

A text measure takes part in a pass through an *observer*: what it asks of each forward call (attention
maps, hidden states, an attention mask), what it does before and after each call (hooks that capture the
queries and keys as the model forms them, sums over the states it returned), and what it returns at the end.
:func:`run_pass` calls the model once per batch with the union of those requests and hands the output to
every observer, so ``posviz attention`` and ``posviz hidden`` together cost one forward pass per batch, not
two, and one model load, not two (TransformerLens's ``run_with_cache`` idea, with sums in place of a cache).

:func:`observe_text` is the entry point: it loads the model and cuts the corpus once
(:func:`posviz.observe.runner.load_blocks`), lets each request (:class:`~posviz.observe.attention_pass.AttentionRequest`,
:class:`~posviz.observe.hidden_pass.HiddenRequest`) choose its layers and build its observer, runs the pass,
and collects each measure's result. ``posviz.attention`` and ``posviz.hidden`` are this pass with one request.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from posviz.observe.text_input import TextInput

if TYPE_CHECKING:
    import numpy as np

#: Forward-call flags an observer may ask for; the pass asks for each one that any observer does.
FLAGS = ("output_attentions", "output_hidden_states", "attention_mask")


class TextObserver(Protocol):
    """What a text measure does during one pass (see the module docstring)."""

    def forward_kwargs(self) -> dict[str, Any]:
        """Flags of :data:`FLAGS` set to True that the forward call needs, and ``use_cache`` where it applies."""

    def before(self, ids: Any) -> None:
        """Called before the forward pass of each batch of ids."""

    def after(self, ids: Any, out: Any) -> None:
        """Called with the model's output for each batch of ids."""

    def close(self) -> None:
        """Remove hooks; called once, after the last batch or on an error."""

    def finish(self, run: Any) -> Any:
        """The measure's result, after the last batch (``run``: the :class:`~posviz.observe.runner.BlockRun`).

        An observer may also have an ``order`` attribute: the order in which the blocks should run (the hidden
        states' probe sample first); the first observer that has one sets it for the pass.
        """


class TextRequest(Protocol):
    """A text measure asked for in a pass, with its own options."""

    name: str

    def check(self) -> None:
        """Refuse bad options before any model is loaded."""

    def needs_eager(self) -> bool:
        """Whether the model must be loaded with eager attention (attention maps read whole)."""

    def layer_count(self, loaded: Any) -> int:
        """How many layers the measure sees in ``loaded``."""

    @property
    def layers(self) -> Any:
        """The layers asked for (``"all"``, ``"0,2"``, a list, ``None``)."""

    def observer(self, run: Any, layers: list[int], batch_size: int) -> TextObserver:
        """The observer of one pass over ``run``'s blocks, for the chosen ``layers``, in batches of ``batch_size``.

        ``run.eager_for`` names the measures for which the model runs eager attention (a measure that reads the
        attention another way sums the eager maps there are). A request may also have ``start(stack)`` (called
        before the model loads) and ``fall_back(run, layers, batch_size, why)`` (called when a pass found the
        attention inputs not capturable, before the pass runs again with eager attention).
        """


@dataclass(frozen=True)
class TextPass:
    """What one pass over text returned: each requested measure's result, by name.

    Attributes
    ----------
    results
        ``{"attention": AttentionResult, "hidden": HiddenResult, ...}``, for the measures requested.
    model
        The model, as named in outputs.
    blocks, seq_len
        Blocks run and positions per block.
    forward_calls
        Forward calls the pass made (one per batch, plus a short probe where eager maps are located).
    """

    results: dict[str, Any]
    model: str
    blocks: int
    seq_len: int
    forward_calls: int = 0
    passes: int = field(default=1)

    def __getitem__(self, name: str) -> Any:
        return self.results[name]


def run_pass(model: Any, blocks: np.ndarray, observers: Sequence[TextObserver], *, batch_size: int,
             progress: Callable[[int], None] | None = None) -> int:
    """One forward pass per batch of ``blocks`` with what every observer asks for; returns the blocks run.

    Each observer's :meth:`~TextObserver.before` and :meth:`~TextObserver.after` see every batch, in the order
    given; :meth:`~TextObserver.close` runs in every case.
    """
    import torch

    from posviz.observe.runner import run_batches

    kwargs: dict[str, Any] = {}
    for o in observers:
        for key, value in o.forward_kwargs().items():
            kwargs[key] = (kwargs.get(key, False) or bool(value)) if key in FLAGS else value
    mask = kwargs.pop("attention_mask", False)
    kwargs = {k: v for k, v in kwargs.items() if k not in FLAGS or v}

    def forward(ids: Any) -> None:
        for o in observers:
            o.before(ids)
        out = model(ids, attention_mask=torch.ones_like(ids), **kwargs) if mask else model(ids, **kwargs)
        for o in observers:
            o.after(ids, out)
        del out

    with contextlib.ExitStack() as stack:
        for o in observers:
            stack.callback(o.close)
        return run_batches(model, blocks, batch_size, forward, progress)


def observe_text(model: str, requests: Sequence[TextRequest], text: TextInput | None = None, **options: Any) -> TextPass:
    """Run ``model`` once over blocks of ``corpus`` and measure every request on that one pass.

    Parameters
    ----------
    model
        Model folder, hub id, packaged model, ``RUN`` or ``RUN@STEP``.
    requests
        The measures, with their options: :class:`~posviz.observe.attention_pass.AttentionRequest`,
        :class:`~posviz.observe.hidden_pass.HiddenRequest` (at most one of each name).
    text, **options
        The text and how it runs, shared by every request: a :class:`~posviz.observe.text_input.TextInput`, or its
        fields as keywords (``corpus``, ``seq_len``, ``batch_size``, ``max_blocks``, ``device``, ``device_map``,
        ``tokenizer``, ``token_blocks``, ``block_layout``, ``special_positions``, ``show_progress``).

    Returns
    -------
    TextPass
        Each request's result by name (``pass_["attention"]``), and the forward calls made.

    Raises
    ------
    PosvizError
        Bad options, an empty corpus, a block longer than the model's positions, a layer that does not exist.

    Examples
    --------
    >>> from posviz.observe.attention_pass import AttentionRequest
    >>> from posviz.observe.hidden_pass import HiddenRequest
    >>> both = observe_text("model/", [AttentionRequest(layers="all"), HiddenRequest()], seq_len=64)  # doctest: +SKIP
    >>> both["attention"].to_frame(), both["hidden"].to_frame()  # doctest: +SKIP
    """
    from posviz.errors import OptionError
    from posviz.observe.runner import choose_layers, load_blocks

    names = [r.name for r in requests]
    if not names or len(set(names)) != len(names):
        raise OptionError(f"a text pass takes each measure once, got {names}")
    text = TextInput.of(text, options)
    text.check()
    for r in requests:
        r.check()
    with contextlib.ExitStack() as stack:
        for r in requests:
            start = getattr(r, "start", None)
            if start is not None:  # e.g. the probe worker, started while the model loads
                start(stack)
        eager = tuple(r.name for r in requests if r.needs_eager())  # one model for every measure: eager if one needs it
        run = replace(load_blocks(model, text, attn_implementation="eager" if eager else None), eager_for=eager)
        layers = {r.name: choose_layers(run.loaded, r.layers, r.layer_count(run.loaded)) for r in requests}
        return _measure(run, requests, layers, batch_size=text.batch_size, show_progress=text.show_progress)


def _measure(run: Any, requests: Sequence[Any], layers: Mapping[str, list[int]], *, batch_size: int,
             show_progress: bool) -> TextPass:
    """The pass itself; run again with eager attention where the queries and keys turned out not to be capturable."""
    from posviz.observe.tiled.capture import NotCapturable
    from posviz.util.progress import count_progress

    calls = [0]
    counter = run.loaded.model.register_forward_pre_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    try:
        for attempt in range(2):
            observers = {r.name: r.observer(run, layers[r.name], batch_size) for r in requests}
            order = next((o.order for o in observers.values() if getattr(o, "order", None) is not None), None)
            ids = run.ids if order is None else run.ids[order]
            try:
                with count_progress(len(ids), "blocks") as update:
                    blocks = run_pass(run.loaded.model, ids, list(observers.values()), batch_size=batch_size,
                                      progress=update if show_progress else None)
            except NotCapturable as e:
                if attempt:
                    raise
                for r in requests:
                    fall_back = getattr(r, "fall_back", None)
                    if fall_back is not None:
                        fall_back(run, layers[r.name], batch_size, str(e))
                continue
            results = {name: o.finish(run) for name, o in observers.items()}
            return TextPass(results=results, model=run.loaded.label, blocks=blocks, seq_len=run.seq_len,
                            forward_calls=calls[0], passes=attempt + 1)
    finally:
        counter.remove()
    raise AssertionError("unreachable")  # pragma: no cover
