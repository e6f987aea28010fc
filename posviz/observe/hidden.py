"""``posviz.hidden(...)``: where position lives inside a model, layer by layer, from its hidden states on a corpus.

From a model and a corpus: load, cut the corpus into token blocks (the block runner
shared with ``posviz attention``, :mod:`posviz.observe.runner`), accumulate every
chosen layer's hidden states as streaming sums (:mod:`posviz.observe.hidden_sums`),
then per layer the positional vectors, their Toeplitzness, the positional share with
its null, their rank (:mod:`posviz.observe.hidden_statistics`) and linear position
probes on a sample of held-out blocks (:mod:`posviz.observe.probe`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from posviz.observe.hidden_statistics import HiddenLayer
from posviz.observe.probe import ProbeResult
from posviz.train.corpus import DEMO_CORPUS

if TYPE_CHECKING:
    from posviz.observe.hidden_sums import HiddenSums, ProbeSample
    from posviz.observe.probe_worker import ProbeJob

#: Fields of a record, in order (after ``model`` and ``layer``).
FIELDS = ("positional_share", "positional_share_null", "context_share", "toeplitzness_offdiag", "toeplitzness",
          "toeplitzness_null_offdiag", "toeplitzness_null", "toeplitzness_null_std_offdiag", "excess_offdiag", "excess",
          "rank90", "stable_rank", "positional_norm", "state_norm")


@dataclass(frozen=True)
class HiddenResult:
    """Position in the hidden states of the chosen layers of one model over one corpus.

    Attributes
    ----------
    model
        The model, as named in outputs.
    layers
        Hidden-state indices scored (0 = the embedding output, ``l`` = the output of block ``l``).
    seq_len, blocks
        Positions per block, blocks run.
    kept
        The positions every statistic uses (special-token positions left out).
    layout
        Which special tokens sit at which positions of every block.
    corpus
        The corpus, as named in outputs.
    stats
        Per layer, :class:`~posviz.observe.hidden_statistics.HiddenLayer`.
    probes
        Per layer, :class:`~posviz.observe.probe.ProbeResult`.
    vectors
        Per layer, the positional vectors ``V`` ``(len(kept), d)``.
    seed
        Seed of the null draws, the probe sample and the probes.
    """

    model: str
    layers: list[int]
    seq_len: int
    blocks: int
    kept: np.ndarray
    layout: str
    corpus: str
    stats: dict[int, HiddenLayer]
    probes: dict[int, ProbeResult]
    vectors: dict[int, np.ndarray] = field(repr=False)
    seed: int = 0

    @property
    def excluded(self) -> list[int]:
        """Positions left out (they hold the same special token in every block)."""
        return sorted(set(range(self.seq_len)) - {int(i) for i in self.kept})

    @property
    def conventions(self) -> str:
        """One line stating how the numbers were made."""
        left = (f"positions {', '.join(map(str, self.excluded))} left out (a special token in every block)"
                if self.excluded else "no position left out")
        p = self.probes[self.layers[0]]
        return (f"{self.blocks} blocks of {self.seq_len} tokens from {self.corpus}; {self.layout}; {left}; layer 0 = embedding "
                "output; share null: positions shuffled within blocks (exact mean); Toeplitzness null: rows of V permuted "
                f"(exact mean); probes: {p.train_blocks} training and {p.test_blocks} held-out blocks (seed {self.seed})")

    def records(self) -> list[dict[str, Any]]:
        """One plain dict per layer, JSON-ready."""
        out = []
        for layer in self.layers:
            s, p = self.stats[layer], self.probes[layer]
            r: dict[str, Any] = {"model": self.model, "layer": layer}
            for name in FIELDS:
                value = getattr(s, name)
                r[name] = int(value) if name == "rank90" else float(value)
            r.update(probe_mae=p.mae, probe_mae_baseline=p.mae_baseline, probe_order_accuracy=p.order_accuracy,
                     probe_order_chance=0.5, probe_train_blocks=p.train_blocks, probe_test_blocks=p.test_blocks,
                     blocks=self.blocks, seq_len=self.seq_len, positions=len(self.kept),
                     excluded_positions=",".join(map(str, self.excluded)))
            out.append(r)
        return out

    def to_frame(self) -> Any:
        """The records as a pandas DataFrame, one row per layer."""
        import pandas as pd

        return pd.DataFrame(self.records())


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


def hidden(
    model: str,
    *,
    corpus: str | Sequence[str] = DEMO_CORPUS,
    seq_len: int = 128,
    layers: str | Sequence[int] | None = "all",
    batch_size: int = 8,
    max_blocks: int | None = 256,
    device: str | None = None,
    device_map: str | None = None,
    tokenizer: str | None = None,
    token_blocks: np.ndarray | None = None,
    block_layout: str = "token blocks given",
    special_positions: Sequence[int] = (),
    probe_blocks: int = 64,
    probe_positions: int = 32,
    null_draws: int = 10,
    seed: int = 0,
    show_progress: bool = False,
) -> HiddenResult:
    """Run ``model`` over blocks of ``corpus`` and measure position in the hidden states of ``layers``.

    Parameters
    ----------
    model
        Model folder, hub id, packaged model, ``RUN`` or ``RUN@STEP``.
    corpus
        Corpus spec(s) as ``posviz train`` reads them: text files, folders, the demo
        corpus (:data:`~posviz.train.corpus.DEMO_CORPUS`) or a dataset id.
    seq_len
        Positions per block, special tokens included.
    layers
        ``"all"`` (default), ``"0,2,5-7"`` or a list of ints; 0 is the embedding output.
    batch_size
        Blocks per forward pass.
    max_blocks
        At most this many blocks (``None``: the whole corpus).
    device, device_map
        ``cpu``/``cuda``, or ``device_map="auto"`` (accelerate) for models larger than one device.
    tokenizer
        A tokenizer to use instead of the model's (or the run's).
    token_blocks
        Ready token ids ``(blocks, seq_len)`` instead of a corpus (``seq_len`` is then their width).
    block_layout, special_positions
        What sits where in ``token_blocks``; ``special_positions`` are left out.
    probe_blocks, probe_positions
        Size of the probes' sample: at most this many blocks, and positions per block.
    null_draws
        Row permutations of ``V`` for the spread of the Toeplitzness null.
    seed
        Seed of the null draws, the probe sample, its block split and its pairs.
    show_progress
        Draw a progress bar over blocks on stderr (when it is a terminal).

    Returns
    -------
    HiddenResult

    Raises
    ------
    PosvizError
        A corpus shorter than one block, a block longer than the model's position
        table, a layer that does not exist, a model that returns no hidden states.

    Examples
    --------
    >>> r = posviz.hidden("sentence-transformers/all-MiniLM-L6-v2", corpus="docs.txt", seq_len=64)  # doctest: +SKIP
    >>> r.to_frame()[["layer", "positional_share", "toeplitzness_offdiag", "probe_mae"]]  # doctest: +SKIP
    """
    from posviz.observe.hidden_sums import accumulate_hidden, probe_plan
    from posviz.observe.probe_worker import probe_worker
    from posviz.observe.runner import check_sizes, prepare_blocks
    from posviz.util.progress import count_progress

    check_sizes(seq_len, batch_size, max_blocks)
    with probe_worker() as worker:  # started first, so that it imports scikit-learn while the model loads
        run = prepare_blocks(model, corpus=corpus, seq_len=seq_len, layers=layers,
                             layer_count=lambda m: m.num_layers + 1, max_blocks=max_blocks, device=device,
                             device_map=device_map, tokenizer=tokenizer, token_blocks=token_blocks,
                             block_layout=block_layout, special_positions=special_positions,
                             attn_implementation=None)  # hidden states only: the model's default (SDPA) attention
        special = set(run.special_positions)
        kept = np.array([i for i in range(run.seq_len) if i not in special], dtype=np.int64)
        if len(kept) < 2:
            from posviz.errors import OptionError

            raise OptionError(f"--seq-len {run.seq_len} leaves {len(kept)} text position(s)", "use a longer --seq-len")
        plan = probe_plan(len(run.ids), kept, probe_blocks=probe_blocks, probe_positions=probe_positions, seed=seed)
        middle = (float(kept[0]) + float(kept[-1])) / 2  # the probe's baseline predicts the middle of the kept range
        with count_progress(len(run.ids), "blocks") as update:  # the probes are fitted by the worker meanwhile
            sums = accumulate_hidden(run.loaded.model, run.ids, run.layers, kept, batch_size=batch_size, plan=plan,
                                     progress=update if show_progress else None,
                                     on_sample=lambda sample: worker.submit(probe_jobs(sample, run.layers, middle, seed)))
        stats, vectors = _measure_layers(sums, run.layers, null_draws=null_draws, seed=seed)
        probes = worker.results()
    return HiddenResult(model=run.loaded.label, layers=run.layers, seq_len=run.seq_len, blocks=sums.blocks, kept=kept,
                        layout=run.layout, corpus=run.corpus, stats=stats, probes=probes, vectors=vectors, seed=seed)


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


def _measure_layers(sums: HiddenSums, layers: Sequence[int], *, null_draws: int, seed: int
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
