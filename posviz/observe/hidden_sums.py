"""Run a model over token blocks and accumulate each chosen layer's hidden states as streaming float64 sums.

Per chosen layer ``l`` (0 = the embedding output, then one per block) and position
``i`` only three sums are kept: ``S_l[i] = sum_b h_l[b, i]`` (``(n, d)``),
``Q_l[i] = sum_b ||h_l[b, i]||**2`` (``(n,)``) and ``C_l = sum_b ||m_l[b]||**2``,
``m_l[b]`` the mean of block ``b``'s hidden states over the kept positions
(:mod:`posviz.observe.hidden_statistics` turns them into every statistic). They live
in float64 on the device that produced the layer (several devices under
``device_map="auto"``), so memory is O(layers x n x d) whatever the corpus size.

Besides the sums, a seeded sample of blocks and positions keeps its hidden states
(float32, on the CPU) for the position probe (:mod:`posviz.observe.probe`). The sampled
blocks run first, so that the probes can be fitted elsewhere
(:mod:`posviz.observe.probe_worker`) while the other blocks run.

Hidden states come from the text pass's forward call (:mod:`posviz.observe.text_pass`), asked for with
``output_hidden_states=True``; models that do not return them are refused.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from posviz.errors import UnsupportedModelError
from posviz.observe.hidden_states_measure import HiddenStatesObserver


@dataclass(frozen=True)
class HiddenLayerSums:
    """Streaming sums of one layer's hidden states over ``blocks`` blocks, as numpy float64.

    Attributes
    ----------
    blocks
        ``B``, the number of blocks summed.
    total
        ``(n, d)``: ``sum_b h[b, i]``.
    total_sq
        ``(n,)``: ``sum_b ||h[b, i]||**2``.
    block_mean_sq
        ``sum_b ||m[b]||**2``, ``m[b]`` the mean over the kept positions of block ``b``.
    kept
        The positions the block means were taken over (and the statistics use).
    """

    blocks: int
    total: np.ndarray
    total_sq: np.ndarray
    block_mean_sq: float
    kept: np.ndarray


@dataclass
class ProbeSample:
    """Hidden states of a seeded sample of blocks and positions, for the position probe.

    Attributes
    ----------
    blocks
        Global indices of the sampled blocks, in run order.
    positions
        ``(len(blocks), k)``: the sampled positions of each block.
    states
        Per layer, ``(len(blocks), k, d)`` float32 hidden states.
    """

    blocks: list[int] = field(default_factory=list)
    positions: list[np.ndarray] = field(default_factory=list)
    states: dict[int, list[np.ndarray]] = field(default_factory=dict)

    def layer(self, layer: int) -> np.ndarray:
        """``(blocks, k, d)`` float32 states of one layer."""
        return np.stack(self.states[layer]) if self.states.get(layer) else np.empty((0, 0, 0), dtype=np.float32)


def probe_plan(num_blocks: int, kept: np.ndarray, *, probe_blocks: int, probe_positions: int,
               seed: int) -> dict[int, np.ndarray]:
    """Which blocks (global index) keep their states for the probe, and at which positions (sorted).

    ``probe_blocks`` blocks drawn without replacement (all when there are fewer), and
    in each ``probe_positions`` kept positions drawn without replacement (all when
    there are fewer), from ``numpy.random.default_rng(seed)``.
    """
    rng = np.random.default_rng(seed)
    chosen = np.sort(rng.choice(num_blocks, size=min(probe_blocks, num_blocks), replace=False))
    take = min(probe_positions, len(kept))
    return {int(b): np.sort(rng.choice(kept, size=take, replace=False)) for b in chosen}


class HiddenSums:
    """Float64 running sums of some layers' hidden states (created at the first batch, on its device)."""

    def __init__(self, layers: Sequence[int], kept: np.ndarray, plan: dict[int, np.ndarray], order: np.ndarray) -> None:
        self.layers = list(layers)
        self.kept = np.asarray(kept, dtype=np.int64)
        self.blocks = 0
        self.plan = plan
        self.order = order  # global index of the block run at each step (the sampled blocks run first)
        self.sample = ProbeSample(states={layer: [] for layer in self.layers})
        self._sums: dict[int, list[Any]] = {}

    def add(self, layer: int, states: Any, first_block: int) -> None:
        """Add one batch of one layer: ``states`` of shape ``(batch, n, d)``, its first block's step in the run."""
        import torch

        h = states.detach().to(torch.float64)
        kept = torch.as_tensor(self.kept, device=h.device)
        means = h.index_select(1, kept).mean(dim=1)  # (B, d): each block's mean over the kept positions
        parts = (h.sum(dim=0), (h * h).sum(dim=(0, 2)), (means * means).sum())
        if layer not in self._sums:
            self._sums[layer] = list(parts)
        else:
            for acc, part in zip(self._sums[layer], parts, strict=True):
                acc += part
        for row in range(int(h.shape[0])):
            where = self.plan.get(self.block_index(first_block + row))
            if where is not None:
                self.sample.states[layer].append(states[row, torch.as_tensor(where, device=states.device)].float().cpu().numpy())

    def block_index(self, step: int) -> int:
        """The global index of the block run at ``step``."""
        return int(self.order[step])

    def note_sampled(self, first_block: int, size: int) -> None:
        """Record the sampled blocks of a batch (once per batch, after its layers)."""
        for b in map(self.block_index, range(first_block, first_block + size)):
            if b in self.plan:
                self.sample.blocks.append(b)
                self.sample.positions.append(self.plan[b])

    @property
    def sample_complete(self) -> bool:
        """Whether every block of the probe's plan has been run."""
        return len(self.sample.blocks) == len(self.plan)

    @property
    def nbytes(self) -> tuple[int, int]:
        """``(bytes of the running sums, bytes of the probe sample)``: what this accumulator holds."""
        sums = sum(t.numel() * t.element_size() for parts in self._sums.values() for t in parts)
        return sums, sum(a.nbytes for arrays in self.sample.states.values() for a in arrays)

    def layer(self, layer: int) -> HiddenLayerSums:
        """The sums of one layer, as numpy arrays."""
        total, total_sq, mean_sq = (t.cpu().numpy() for t in self._sums[layer])
        return HiddenLayerSums(blocks=self.blocks, total=total, total_sq=total_sq, block_mean_sq=float(mean_sq),
                               kept=self.kept)


def _no_states(model: Any) -> UnsupportedModelError:
    return UnsupportedModelError(
        f"{type(model).__name__} returned no hidden states",
        "posviz hidden runs the model with output_hidden_states=True; this architecture does not return them",
    )


class HiddenStates(HiddenStatesObserver):
    """The hidden-state sums' observer in a text pass (:mod:`posviz.observe.text_pass`): asks for every hidden
    state, adds the chosen layers to :class:`HiddenSums`, and hands the probe's sample on as soon as it is complete.

    Attributes
    ----------
    order
        The order in which the pass runs the blocks: the probe's ``plan`` first.
    sums
        The running sums (:meth:`finish` returns them).
    """

    def __init__(self, model: Any, num_blocks: int, layers: Sequence[int], kept: np.ndarray,
                 plan: dict[int, np.ndarray] | None = None, on_sample: Callable[[ProbeSample], None] | None = None) -> None:
        planned = np.array(sorted(plan or {}), dtype=np.int64)
        self.order = np.concatenate([planned, np.setdiff1d(np.arange(num_blocks), planned)])
        self.model, self.on_sample, self.handed = model, on_sample, False
        self.sums = HiddenSums(layers, kept, plan or {}, self.order)

    def after(self, ids: Any, out: Any) -> None:
        states = getattr(out, "hidden_states", None)
        if not states or any(s is None for s in states):
            raise _no_states(self.model)
        sums = self.sums
        if max(sums.layers) >= len(states):
            raise UnsupportedModelError(f"{type(self.model).__name__} returned {len(states)} hidden states, not layer {max(sums.layers)}")
        for layer in sums.layers:
            sums.add(layer, states[layer], sums.blocks)
        sums.note_sampled(sums.blocks, int(ids.shape[0]))
        sums.blocks += int(ids.shape[0])
        if self.on_sample is not None and not self.handed and sums.sample_complete:
            self.handed = True
            self.on_sample(sums.sample)

    def finish(self, run: Any = None) -> HiddenSums:
        if self.on_sample is not None and not self.handed:  # no blocks at all
            self.handed = True
            self.on_sample(self.sums.sample)
        return self.sums


def accumulate_hidden(model: Any, blocks: np.ndarray, layers: Sequence[int], kept: np.ndarray, *, batch_size: int = 8,
                      plan: dict[int, np.ndarray] | None = None,
                      progress: Callable[[int], None] | None = None,
                      on_sample: Callable[[ProbeSample], None] | None = None) -> HiddenSums:
    """Streaming hidden-state sums of ``layers`` over ``blocks`` ``(num_blocks, n)`` of token ids.

    The blocks of the probe's ``plan`` run first, so that its sample is complete early
    and the probes can be fitted elsewhere while the other blocks run; the sums do not
    depend on the order (up to float64 rounding).

    Parameters
    ----------
    model
        A loaded model in eval mode.
    blocks
        Token ids, one block per row.
    layers
        Hidden-state indices to keep (0 = the embedding output).
    kept
        Positions the statistics use (special-token positions left out).
    batch_size
        Blocks per forward pass.
    plan
        Blocks and positions whose states are kept for the probe (:func:`probe_plan`).
    progress
        Called with the number of blocks done after each batch.
    on_sample
        Called once with the probe's sample, as soon as every block of ``plan`` has run.

    Raises
    ------
    UnsupportedModelError
        No hidden states, or fewer than the layers asked for.
    """
    from posviz.observe.text_pass import run_pass

    observer = HiddenStates(model, len(blocks), layers, kept, plan, on_sample)
    run_pass(model, blocks[observer.order], [observer], batch_size=batch_size, progress=progress)
    return observer.finish()
