"""``posviz.extrapolate(...)``: held-out loss and attention statistics of models at lengths within and beyond training.

Per model: its objective, table and training length from the config
(:mod:`~posviz.extrapolation.objective`); the text budget with its tokenizer
(:mod:`~posviz.extrapolation.blocks`); then per variant (unscaled, and each RoPE
scaling, :mod:`~posviz.extrapolation.scaling`) the model is loaded once with its
language-model head and run at every length (:mod:`~posviz.extrapolation.evaluate`).
A length beyond a learned table is not run; a length the model itself refuses is
recorded with the model's reason. Neither stops the other lengths.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from posviz.errors import OptionError
from posviz.extrapolation.result import ExtrapolationResult, LengthRecord
from posviz.extrapolation.scaling import RopeScaling
from posviz.extrapolation.tasks import TaskResult
from posviz.train.corpus import DEMO_CORPUS

#: Lengths of ``posviz extrapolate`` when none are given.
DEFAULT_LENGTHS = (64, 128, 256, 512, 1024)


def parse_lengths(lengths: str | Sequence[int]) -> list[int]:
    """``"64,128,256"`` (or a list of ints) → distinct lengths, ascending.

    Raises
    ------
    OptionError
        An empty list, or an entry that is not an integer of at least 2.
    """
    items = [x.strip() for x in lengths.split(",")] if isinstance(lengths, str) else list(lengths)
    out = set()
    for x in items:
        try:
            value = int(x) if not isinstance(x, float) or x.is_integer() else None
        except (TypeError, ValueError):
            value = None
        if value is None or isinstance(x, bool) or value < 2:
            raise OptionError(f"--lengths: {x!r} is not a length (an integer of at least 2)", "for example --lengths 64,128,256")
        out.add(value)
    if not out:
        raise OptionError("--lengths is empty", "for example --lengths 64,128,256")
    return sorted(out)


def _check(batch_size: int, max_blocks: int | None, stride: int | None, mask_rate: float, lengths: list[int]) -> None:
    if batch_size < 1 or (max_blocks is not None and max_blocks < 1):
        raise OptionError("--batch-size and --max-blocks must be at least 1")
    if not 0 < mask_rate < 1:
        raise OptionError(f"--mask-rate {mask_rate} must be between 0 and 1")
    if stride is not None and not 1 <= stride < lengths[0]:
        raise OptionError(f"--stride {stride} must be at least 1 and shorter than the shortest length {lengths[0]}")


def extrapolate(
    models: str | Sequence[str],
    *,
    corpus: str | Sequence[str] = DEMO_CORPUS,
    lengths: str | Sequence[int] = DEFAULT_LENGTHS,
    rope_scaling: Sequence[str | RopeScaling] = (),
    extend_table: bool = False,
    stride: int | None = None,
    layers: str | Sequence[int] | None = "all",
    batch_size: int = 4,
    max_blocks: int | None = 8,
    mask_rate: float = 0.15,
    seed: int = 0,
    device: str | None = None,
    device_map: str | None = None,
    tokenizer: str | None = None,
    show_progress: bool = False,
    exact_maps: bool = False,
    task: str | None = None,
    examples: int = 100,
) -> ExtrapolationResult | TaskResult:
    """Held-out loss and per-head attention statistics of ``models`` at each of ``lengths``, on the same text.

    Parameters
    ----------
    models
        Model folders, hub ids, packaged models, ``RUN`` or ``RUN@STEP`` (one or several).
    corpus
        Corpus spec(s) as ``posviz train`` reads them (default: the demo corpus).
    lengths
        ``"64,128,256"`` or a list of ints: positions per window, special tokens included.
    rope_scaling
        RoPE-scaling variants (``"linear:2"``, ``"dynamic:2"``, ``"yarn:4"``, ``"llama3:8"``),
        each evaluated beside the unscaled model; RoPE models only.
    extend_table
        For a model whose learned position table is shorter than the longest length, add
        the variant ``interpolated:N``: the table linearly interpolated to N, the longest
        length (:mod:`posviz.extrapolation.table`). A model without such a table gets a warning.
    stride
        ``None``: non-overlapping blocks; else sliding windows of this stride (each scores its last ``stride`` tokens).
    layers
        ``"all"`` (default), ``"0,2,5-7"`` or a list of ints: layers whose heads are measured.
    batch_size
        Windows per forward pass.
    max_blocks
        Blocks of the longest length that make the text budget (``None``: the whole corpus).
    mask_rate, seed
        Masked LMs: share of the text tokens masked, and the seed of their positions.
    device, device_map, tokenizer
        ``cpu``/``cuda``, or ``device_map="auto"`` (accelerate); a tokenizer instead of each model's (or run's).
    show_progress
        Draw a progress bar over windows on stderr (when it is a terminal).
    exact_maps
        Sum eager attention maps instead of the default tiles of queries and keys (:mod:`posviz.observe.tiled`).
    task, examples
        Evaluate ``posviz train --task`` runs on their task, ``examples`` per length (:func:`task_extrapolate`).

    Returns
    -------
    ExtrapolationResult, or TaskResult with ``task``

    Raises
    ------
    PosvizError
        No model, bad lengths or options, an unknown or unsupported RoPE scaling, a
        scaling of a model without RoPE, a corpus too short for the longest length,
        ``extend_table`` with ``device_map``.

    Examples
    --------
    >>> r = posviz.extrapolate("gpt2", corpus="docs.txt", lengths="256,1024,2048")  # doctest: +SKIP
    >>> r.to_frame().groupby(["length", "layer"]).entropy.mean()  # doctest: +SKIP
    """
    from posviz.extrapolation.scaling import check_scalable, parse_scaling
    from posviz.read.sources import resolve_source
    from posviz.train.corpus import corpus_identity, load_corpus

    specs = [models] if isinstance(models, str) else list(models)
    if not specs:
        raise OptionError("give at least one MODEL", "for example: posviz extrapolate gpt2 --lengths 256,1024,2048")
    if task is not None:
        return task_extrapolate(specs, task, lengths, examples=examples, layers=layers, batch_size=batch_size, device=device,
                                exact_maps=exact_maps, text_options=bool(rope_scaling or extend_table or stride or tokenizer))
    chosen = parse_lengths(lengths)
    scalings = list(dict.fromkeys(s if isinstance(s, RopeScaling) else parse_scaling(s) for s in rope_scaling))
    _check(batch_size, max_blocks, stride, mask_rate, chosen)
    if extend_table and device_map is not None:
        raise OptionError("--extend-table does not combine with --device-map", "the model is rebuilt on one device")
    configs = {spec: resolve_source(spec).config for spec in specs}
    for spec, config in configs.items():
        check_scalable(spec, config, scalings)
    corpus_specs = [corpus] if isinstance(corpus, str) else list(corpus)
    texts = load_corpus(corpus_specs)
    settings = dict(lengths=chosen, stride=stride, layers=layers, batch_size=batch_size, max_blocks=max_blocks,
                    mask_rate=mask_rate, seed=seed, device=device, device_map=device_map, tokenizer=tokenizer,
                    show_progress=show_progress, extend_table=extend_table, exact_maps=exact_maps)
    runs, budget = _text_runs(configs, texts, scalings, settings)
    return ExtrapolationResult(runs=runs, lengths=chosen, corpus=", ".join(corpus_specs), corpus_identity=corpus_identity(texts),
                               budget=budget, stride=stride, mask_rate=mask_rate, seed=seed, exact_maps=exact_maps)


def _text_runs(configs: dict[str, Any], texts: Sequence[str], scalings: list[RopeScaling],
               settings: dict[str, Any]) -> tuple[list[LengthRecord], dict[str, int]]:
    """Every model at every length on the text: the records, and per model the text tokens of its budget."""
    from posviz.extrapolation.models import model_runs

    runs: list[LengthRecord] = []
    budget: dict[str, int] = {}
    for spec, config in configs.items():
        label, tokens, records = model_runs(spec, config, texts, scalings, **settings)
        budget[label] = tokens
        runs += records
    return runs, budget



def task_extrapolate(specs: list[str], task: str, lengths: str | Sequence[int], *, examples: int, layers: Any, batch_size: int,
                     device: str | None, exact_maps: bool, text_options: bool = False) -> TaskResult:
    """:func:`extrapolate` with ``task``: every task run at every task length, on one test split.

    ``lengths`` are the task's own (items, digits; :mod:`posviz.extrapolation.tasks`), ``examples`` test examples each.
    ``text_options``: one of the options that apply to text only was given (``rope_scaling``, ``extend_table``,
    ``stride``, ``tokenizer``), which is refused.
    """
    if text_options:
        raise OptionError("--rope-scaling, --extend-table, --stride and --tokenizer do not apply with --task")
    from posviz.extrapolation.tasks import TEST_SEED, parse_task_lengths, run_task, task_model_records
    from posviz.tasks import make_split

    chosen = parse_task_lengths(task, lengths)
    if examples < 1 or batch_size < 1:
        raise OptionError("--examples and --batch-size must be at least 1")
    for spec in specs:  # every model is checked before any runs
        run_task(spec, task)
    runs = []
    for spec in specs:
        runs += task_model_records(spec, task, chosen, examples=examples, layers=layers, batch_size=batch_size, device=device,
                                   exact_maps=exact_maps)
    data = make_split(task, chosen, examples, seed=TEST_SEED, purpose="test").identity()
    return TaskResult(runs=runs, task=task, lengths=chosen, examples=examples, data=data, exact_maps=exact_maps)
