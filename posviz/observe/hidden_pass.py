"""``posviz hidden`` as a participant of a text pass: its options, its observer, its result.

The observer (:class:`HiddenObserver`) sums the chosen layers' hidden states as the pass returns them
(:class:`~posviz.observe.hidden_sums.HiddenStates`), runs the probe's sample of blocks first and hands it to the
probe worker (:mod:`posviz.observe.probe_worker`), which fits the probes while the other blocks run. At the end it
turns the sums into the per-layer statistics (:mod:`posviz.observe.hidden_statistics`) of a
:class:`~posviz.observe.hidden.HiddenResult`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from posviz.observe.hidden_states_measure import HiddenStatesRequest
from posviz.observe.hidden_sums import HiddenStates

if TYPE_CHECKING:
    from posviz.observe.hidden_statistics import HiddenLayer
    from posviz.observe.hidden_sums import HiddenSums, ProbeSample
    from posviz.observe.probe_worker import ProbeJob


@dataclass
class HiddenRequest(HiddenStatesRequest):
    """Position in the hidden states of ``layers``, in a text pass.

    Attributes
    ----------
    layers
        ``"all"`` (default), ``"0,2,5-7"`` or a list of ints; 0 is the embedding output.
    probe_blocks, probe_positions, null_draws, seed
        As :func:`posviz.hidden`.
    """

    layers: str | Sequence[int] | None = "all"
    probe_blocks: int = 64
    probe_positions: int = 32
    null_draws: int = 10
    seed: int = 0
    name: str = field(default="hidden", init=False)
    worker: Any = field(default=None, init=False, repr=False)

    def start(self, stack: contextlib.ExitStack) -> None:
        """Start the probe worker before the model loads, so that it imports scikit-learn meanwhile."""
        from posviz.observe.probe_worker import probe_worker

        self.worker = stack.enter_context(probe_worker())

    def fall_back(self, run: Any, layers: list[int], batch_size: int, why: str) -> None:
        """The pass runs again: a sample already handed to the worker is not collected (its child is stopped)."""
        if self.worker is not None and self.worker.pending:
            self.worker.close()

    def observer(self, run: Any, layers: list[int], batch_size: int) -> HiddenObserver:
        """The observer of one pass: kept positions, the probe's plan, the sums."""
        from posviz.errors import OptionError
        from posviz.observe.hidden_sums import probe_plan

        special = set(run.special_positions)
        kept = np.array([i for i in range(run.seq_len) if i not in special], dtype=np.int64)
        if len(kept) < 2:
            raise OptionError(f"--seq-len {run.seq_len} leaves {len(kept)} text position(s)", "use a longer --seq-len")
        plan = probe_plan(len(run.ids), kept, probe_blocks=self.probe_blocks, probe_positions=self.probe_positions,
                          seed=self.seed)
        return HiddenObserver(run.loaded.model, len(run.ids), layers, kept, plan, self)


class HiddenObserver(HiddenStates):
    """:class:`~posviz.observe.hidden_sums.HiddenStates` whose result is a :class:`~posviz.observe.hidden.HiddenResult`."""

    def __init__(self, model: Any, num_blocks: int, layers: Sequence[int], kept: np.ndarray, plan: dict[int, np.ndarray],
                 request: HiddenRequest) -> None:

        self.request = request
        middle = (float(kept[0]) + float(kept[-1])) / 2  # the probe's baseline predicts the middle of the kept range
        worker = request.worker
        if worker is None:  # an observer made outside observe_text: fit the probes in this process
            from posviz.observe.probe_worker import ProbeWorker

            worker = request.worker = ProbeWorker(start=False)
        super().__init__(model, num_blocks, layers, kept, plan,
                         on_sample=lambda sample: worker.submit(probe_jobs(sample, list(layers), middle, request.seed)))

    def finish(self, run: Any = None) -> Any:
        """The :class:`~posviz.observe.hidden.HiddenResult` of the pass (statistics here, probes from the worker)."""
        from posviz.observe.hidden_result import HiddenResult

        sums = super().finish(run)
        r = self.request
        stats, vectors = measure_layers(sums, sums.layers, null_draws=r.null_draws, seed=r.seed)
        probes = r.worker.results()
        return HiddenResult(model=run.loaded.label, layers=sums.layers, seq_len=run.seq_len, blocks=sums.blocks,
                            kept=sums.kept, layout=run.layout, corpus=run.corpus, stats=stats, probes=probes,
                            vectors=vectors, seed=r.seed)


# Below this hidden width the statistics after the forward (the probes' L-BFGS iterations, d x d
# eigendecompositions and Grams of width d) are small BLAS calls, for which OpenBLAS's extra threads cost more
# synchronisation than they save: on 2 cores the probes of one 384-wide layer took 2.5x longer with two BLAS threads
# than with one, about equal at 1024, and 1.6x shorter with two at 2048 (benchmarks/README.md, section 12).
SINGLE_THREAD_BELOW = 1024


def statistics_blas_threads(width: int) -> int | None:
    """BLAS threads for the per-layer statistics of hidden states ``width`` wide: 1 below
    :data:`SINGLE_THREAD_BELOW`, else ``None`` (the library's default).

    One thread also makes the small models' statistics independent of the machine's core count, to the last bit.
    """
    return 1 if width < SINGLE_THREAD_BELOW else None


def probe_jobs(sample: ProbeSample, layers: Sequence[int], middle: float, seed: int) -> list[ProbeJob]:
    """The position probes of each layer of ``sample``, on :func:`statistics_blas_threads` BLAS threads."""
    from posviz.observe.probe_worker import ProbeJob

    positions = np.stack(sample.positions) if sample.positions else np.empty((0, 0), dtype=np.int64)
    jobs = []
    for layer in layers:
        states = sample.layer(layer)
        jobs.append(ProbeJob(layer=layer, states=states, positions=positions, middle=middle, seed=seed,
                             threads=statistics_blas_threads(states.shape[-1])))
    return jobs


def measure_layers(sums: HiddenSums, layers: Sequence[int], *, null_draws: int, seed: int
                    ) -> tuple[dict[int, HiddenLayer], dict[int, np.ndarray]]:
    """Statistics and positional vectors of each layer of the streamed ``sums``, computed on
    :func:`statistics_blas_threads` BLAS threads."""
    from threadpoolctl import threadpool_limits

    from posviz.observe.hidden_statistics import layer_statistics, positional_vectors

    stats, vectors = {}, {}
    with threadpool_limits(limits=statistics_blas_threads(sums.layer(layers[0]).total.shape[1]), user_api="blas"):
        for layer in layers:
            layer_sums = sums.layer(layer)
            stats[layer] = layer_statistics(layer_sums, null_draws=null_draws, seed=seed)
            vectors[layer] = positional_vectors(layer_sums)
    return stats, vectors
