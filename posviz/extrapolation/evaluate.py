"""One model at one length: held-out loss and per-head attention statistics, in one pass over the windows.

The pass is ``posviz attention``'s (:func:`posviz.observe.accumulate.attention_batches`):
each chosen layer's attention maps go, as the layer produces them, into its streaming
sums (:class:`~posviz.observe.accumulate.AttentionSums`, scored afterwards by
:func:`~posviz.observe.statistics.layer_statistics`: sink mass, positional share,
Toeplitzness) and into the entropy and largest-weight sums
(:class:`~posviz.extrapolation.rows.RowSums`). A forward hook on the model reads its
logits in the same forward pass and adds the negative log-likelihood of the scored
tokens (:mod:`posviz.extrapolation.blocks`), then lets them go.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from posviz.errors import UnsupportedModelError
from posviz.extrapolation.blocks import LengthBlocks
from posviz.extrapolation.rows import RowStatistics, RowSums


@dataclass(frozen=True)
class HeadStatistics:
    """Per-head statistics of one layer at one length (arrays of shape ``(heads,)``)."""

    entropy: np.ndarray
    entropy_normalised: np.ndarray
    max_weight: np.ndarray
    sink_mass: np.ndarray
    positional_share: np.ndarray
    toeplitzness_offdiag: np.ndarray
    entropy_by_query: np.ndarray  # (heads, n)
    profiles: np.ndarray  # (heads, 2n - 1): the mean weight at each offset key - query, NaN outside the support


@dataclass(frozen=True)
class LengthOutcome:
    """What one pass at one length measured.

    Attributes
    ----------
    nll
        Summed negative log-likelihood of the scored tokens (nats), ``None`` without a loss.
    tokens
        Tokens scored.
    windows
        Windows (blocks) run.
    causal
        Whether the attention was causal (exact zeros above the diagonal in every chosen layer).
    heads
        Per chosen layer, :class:`HeadStatistics`.
    position_nll, position_tokens
        ``(n,)``: per position of the window, the summed NLL of the tokens scored there and their number (a causal
        LM's token at position ``t`` is predicted from the ``t`` before it); ``None`` without a loss.
    tokens_right, windows_right
        With ``answers`` (causal only): scored tokens that are the argmax given the tokens before them, and windows
        whose scored tokens all are (:func:`posviz.train.task_data.answer_scores`: greedy exact match); else ``None``.
    """

    nll: float | None
    tokens: int
    windows: int
    causal: bool
    heads: dict[int, HeadStatistics]
    position_nll: np.ndarray | None = None
    position_tokens: np.ndarray | None = None
    tokens_right: int | None = None
    windows_right: int | None = None


class _Loss:
    """A forward hook on the model that adds up the NLL of each batch's scored tokens from its logits (and, with
    ``answers``, how many of them are the argmax: the same logits, so exact match costs no second pass)."""

    def __init__(self, model: Any, blocks: LengthBlocks, causal: bool, batch_size: int, answers: bool = False) -> None:
        self.blocks, self.causal, self.batch_size, self.answers = blocks, causal, batch_size, answers and causal
        self.done, self.nll, self.tokens, self.right, self.whole = 0, 0.0, 0, 0, 0
        n = blocks.inputs.shape[1]
        self.position_nll, self.position_tokens = np.zeros(n), np.zeros(n, dtype=np.int64)
        self.pending: tuple[float, int, np.ndarray, np.ndarray, int, int] | None = None
        self.handle = model.register_forward_hook(self._hook, with_kwargs=True)

    def _hook(self, _module: Any, args: Any, kwargs: dict[str, Any], output: Any) -> None:
        import torch
        import torch.nn.functional as F

        ids = kwargs.get("input_ids", args[0] if args else None)
        total, n = self.blocks.inputs.shape
        rows = slice(self.done, min(self.done + self.batch_size, total))
        if ids is None or tuple(ids.shape) != (rows.stop - rows.start, n):
            return  # the short probe pass that finds where the model emits its attention maps
        logits = output.logits if hasattr(output, "logits") else output[0]
        scored = torch.as_tensor(self.blocks.scored[rows], device=logits.device)
        targets = torch.as_tensor(self.blocks.targets[rows], device=logits.device)
        if self.causal:
            # the logits at t - 1 predict the token at t. Nearly every position is scored, so every row of the
            # logits goes to cross_entropy as it lies (a view), the unscored ones ignored, rather than copied out
            labels = torch.full_like(targets, -100)
            labels[:, :-1] = torch.where(scored[:, 1:], targets[:, 1:], -100)
            each = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1), ignore_index=-100,
                                   reduction="none").view(labels.shape)  # 0 where not scored
            by_position = torch.cat([each.new_zeros(1), each[:, :-1].double().sum(dim=0)])  # the token at t, from t before it
            counts = torch.cat([scored.new_zeros(1, dtype=torch.long), scored[:, 1:].long().sum(dim=0)])
            right, whole = self._answers(logits, targets, scored)
        else:  # a masked LM scores about one position in seven: only those rows
            picked = logits[scored].float()
            each = F.cross_entropy(picked, targets[scored], reduction="none") if len(picked) else torch.zeros(0)
            where = scored.nonzero()[:, 1]
            by_position = torch.zeros(n, dtype=torch.float64, device=each.device).index_add_(0, where, each.double())
            counts = torch.zeros(n, dtype=torch.long, device=each.device).index_add_(0, where, torch.ones_like(where))
            right = whole = 0
        self.pending = (float(each.double().sum()), int(scored[:, 1:].sum() if self.causal else scored.sum()),
                        by_position.cpu().numpy(), counts.cpu().numpy(), right, whole)

    def _answers(self, logits: Any, targets: Any, scored: Any) -> tuple[int, int]:
        """Scored tokens that are the argmax given those before them, and rows whose scored tokens all are."""
        if not self.answers:
            return 0, 0
        from posviz.train.task_data import answer_scores

        labels = np.where(scored.cpu().numpy(), targets.cpu().numpy(), -100)
        right, whole = answer_scores(logits.argmax(-1).cpu().numpy(), labels)
        return int(right.sum()), int(whole.sum())

    def reset(self) -> None:
        """Forget what the probe pass left."""
        self.pending = None

    def commit(self, size: int) -> None:
        """Count the batch just run."""
        if self.pending is None:
            raise UnsupportedModelError("the model's forward pass produced no logits for posviz to score",
                                        "the language-model head returned nothing")
        self.nll += self.pending[0]
        self.tokens += self.pending[1]
        self.position_nll += self.pending[2]
        self.position_tokens += self.pending[3]
        self.right += self.pending[4]
        self.whole += self.pending[5]
        self.pending = None
        self.done += size


def run_length(model: Any, blocks: LengthBlocks, layers: Sequence[int], *, objective: str | None, batch_size: int = 4,
               progress: Callable[[int], None] | None = None, tiled: bool = False, answers: bool = False) -> LengthOutcome:
    """Run ``model`` over the windows of one length: loss and the statistics of every head of ``layers``.

    Parameters
    ----------
    model
        A loaded model in eval mode (eager attention), with its language-model head
        when ``objective`` is not ``None``.
    blocks
        The windows and their scored tokens (:func:`posviz.extrapolation.blocks.length_blocks`).
    layers
        Layers whose heads are measured.
    objective
        ``causal``, ``masked`` or ``None`` (no loss).
    batch_size
        Windows per forward pass.
    progress
        Called with the number of windows done after each batch.
    tiled
        The model runs its own attention and the statistics come from tiles of its queries and keys
        (:mod:`posviz.observe.tiled`); where those cannot be captured, one warning and the eager maps.
    answers
        Also count the scored tokens that are the argmax, and the windows whose scored tokens all are (causal only;
        :attr:`LengthOutcome.tokens_right`, :attr:`LengthOutcome.windows_right`).

    Raises
    ------
    UnsupportedModelError
        No attention weights, no logits, or a layer beyond those the model produced.
    """
    from posviz.observe.accumulate import AttentionSums, attention_batches
    from posviz.observe.statistics import layer_statistics

    if tiled:
        from posviz.observe.tiled.capture import NotCapturable
        from posviz.observe.tiled.run import can_capture, to_eager

        if can_capture() is None:  # transformers 4.x has no attention interface: eager, as always, without a warning
            try:
                return _run_length_tiled(model, blocks, layers, objective=objective, batch_size=batch_size, progress=progress,
                                         answers=answers)
            except NotCapturable as e:
                warnings.warn(f"{type(model).__name__}: {e}; falling back to eager attention maps, whose memory grows with n "
                              "squared", stacklevel=2)
        to_eager(model)
    sums, rows = AttentionSums(layers), RowSums(layers)
    loss = _Loss(model, blocks, objective == "causal", batch_size, answers) if objective else None
    wanted, produced = set(layers), [0]

    def on_layer(layer: int, probs: Any) -> None:
        produced[0] = max(produced[0], layer + 1)
        if layer in wanted:
            sums.add(layer, probs)
            rows.add(layer, probs)

    def on_batch(size: int) -> None:
        if max(layers) >= produced[0]:
            raise UnsupportedModelError(f"the model produced attention for {produced[0]} layers, not layer {max(layers)}")
        if loss is not None:
            loss.commit(size)
        sums.blocks += size
        if progress is not None:
            progress(sums.blocks)

    try:
        attention_batches(model, blocks.inputs, batch_size, on_layer, on_batch, None if loss is None else loss.reset)
    finally:
        if loss is not None:
            loss.handle.remove()
    causal = sums.causal()
    heads = {}
    for layer in layers:
        st = layer_statistics(sums.layer(layer), causal)
        r: RowStatistics = rows.layer(layer, sums.blocks, causal)
        heads[layer] = HeadStatistics(entropy=r.entropy, entropy_normalised=r.entropy_normalised, max_weight=r.max_weight,
                                      sink_mass=st.sink_mass, positional_share=st.positional_share,
                                      toeplitzness_offdiag=st.toeplitzness_offdiag, entropy_by_query=r.entropy_by_query,
                                      profiles=st.profiles)
    return _outcome(loss, sums.blocks, causal, heads)


def _outcome(loss: _Loss | None, windows: int, causal: bool, heads: dict[int, HeadStatistics]) -> LengthOutcome:
    """The :class:`LengthOutcome` of a pass: its statistics, and what ``loss`` (``None``: no objective) summed."""
    if loss is None:
        return LengthOutcome(nll=None, tokens=0, windows=windows, causal=causal, heads=heads)
    return LengthOutcome(nll=loss.nll, tokens=loss.tokens, windows=windows, causal=causal, heads=heads,
                         position_nll=loss.position_nll, position_tokens=loss.position_tokens,
                         tokens_right=loss.right if loss.answers else None, windows_right=loss.whole if loss.answers else None)


def _run_length_tiled(model: Any, blocks: LengthBlocks, layers: Sequence[int], *, objective: str | None, batch_size: int,
                      progress: Callable[[int], None] | None, answers: bool) -> LengthOutcome:
    """:func:`run_length` with the model's own attention, the statistics from tiles; NotCapturable where it cannot."""
    from posviz.observe.accumulate import _takes_use_cache
    from posviz.observe.runner import run_batches
    from posviz.observe.tiled.capture import TiledCapture
    from posviz.observe.tiled.statistics import layer_statistics

    loss = _Loss(model, blocks, objective == "causal", batch_size, answers) if objective else None
    kwargs = {"use_cache": False} if _takes_use_cache(model) else {}

    def forward(ids: Any) -> None:
        model(input_ids=ids, **kwargs)
        if loss is not None:
            loss.commit(int(ids.shape[0]))

    try:
        with TiledCapture(model, layers) as capture:
            windows = run_batches(model, blocks.inputs, batch_size, forward, progress=progress)
    finally:
        if loss is not None:
            loss.handle.remove()
    if any(layer not in capture.sums for layer in layers):
        raise UnsupportedModelError(f"the model produced attention for {len(capture.sums)} layers, not layer {max(layers)}")
    heads = {}
    for layer in layers:
        sums = capture.sums[layer]
        st = layer_statistics(sums, capture.supports[layer])
        heads[layer] = HeadStatistics(entropy=st.entropy, entropy_normalised=st.entropy_normalised, max_weight=st.max_weight,
                                      sink_mass=st.sink_mass, positional_share=st.positional_share,
                                      toeplitzness_offdiag=st.toeplitzness_offdiag,
                                      entropy_by_query=sums.entropy.detach().cpu().numpy() / sums.blocks,
                                      profiles=st.profiles)
    return _outcome(loss, windows, all(capture.supports[layer].causal for layer in layers), heads)


def model_refuses(model: Any, ids: np.ndarray) -> str | None:
    """Why ``model`` refuses one window of ``ids`` (its error's first line), or ``None`` when it runs.

    Called after a pass failed, to tell a model that cannot take the length (a
    learned table, a relative scheme with a fixed range) from anything else, which
    is then raised as it is.
    """
    import torch

    first = next(model.parameters()).device
    x = torch.as_tensor(ids[:1]).to(first)
    try:
        with torch.inference_mode():
            model(input_ids=x, attention_mask=torch.ones_like(x))
    except (ValueError, IndexError, RuntimeError) as e:
        text = str(e).strip()
        return f"{type(e).__name__}: {text.splitlines()[0] if text else 'no message'}"
    return None
