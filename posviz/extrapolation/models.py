"""One model through every variant and length: load once per variant, run each length it can take, record the rest.

A length beyond a learned table is recorded without running (an out-of-range index
would be an error on the CPU and an unrecoverable device assert on a GPU). A pass
that fails with ``ValueError``, ``IndexError`` or ``RuntimeError`` is checked by one
bare forward pass of one window: when the model refuses that too, the length is
recorded with the model's own reason; anything else is raised as it is.
"""

from __future__ import annotations

import gc
import warnings
from collections.abc import Sequence
from typing import Any

from posviz.extrapolation.blocks import TextBudget, length_blocks, protocol, text_budget
from posviz.extrapolation.objective import (
    loss_plan,
    untrained_head,
)
from posviz.extrapolation.result import LengthRecord
from posviz.extrapolation.scaling import RopeScaling, check_applied
from posviz.observe.lengths import table_length, training_length


def model_runs(spec: str, config: dict[str, Any], texts: Sequence[str], scalings: list[RopeScaling], *,
               lengths: list[int], stride: int | None, layers: Any, batch_size: int, max_blocks: int | None,
               mask_rate: float, seed: int, device: str | None, device_map: str | None, tokenizer: str | None,
               show_progress: bool, extend_table: bool = False, exact_maps: bool = False) -> tuple[str, int, list[LengthRecord]]:
    """Every variant and length of one model.

    The variants: each RoPE scaling, then the model as it is, then (``extend_table``,
    for a learned table shorter than the longest length) the table interpolated to
    the longest length (:mod:`posviz.extrapolation.table`).

    Returns
    -------
    label, budget, records
        The model as named in outputs, the text tokens of its budget, and one record
        per variant and length.
    """
    from posviz.observe.loading import load_model, load_tokenizer
    from posviz.observe.tiled.run import can_capture

    tiled = not exact_maps and can_capture() is None  # the model keeps its own attention; the statistics come from tiles

    tok = load_tokenizer(spec, tokenizer)
    budget = text_budget(tok, texts, lengths[-1], max_blocks)
    kind, head, no_loss = loss_plan(config, tok)
    by_variant: dict[str, list[LengthRecord]] = {}

    def run(scaling: RopeScaling | None = None, extend_to: int | None = None) -> tuple[str, int | None]:
        """Load one variant, run it at every length into ``by_variant``; its label and table length."""
        loaded = load_model(spec, device=device, device_map=device_map, with_tokenizer=False, head=head,
                            config_edit=scaling.apply if scaling is not None else None,
                            attn_implementation=None if tiled else "eager")
        table, trained = table_length(config, loaded.max_positions), training_length(config, loaded.max_positions)
        variant, parameters = "unscaled", None
        if scaling is not None:
            check_applied(loaded.model, scaling)
            variant = scaling.label
            parameters = scaling.parameters(getattr(loaded.model.config, "max_position_embeddings", None))
        elif extend_to is not None:
            from posviz.extrapolation.table import TableExtension, interpolate_table

            extension = TableExtension(table, extend_to)
            loaded.model = interpolate_table(loaded.model, config, extension.length)
            variant, parameters, table = extension.label, extension.parameters(), extension.length
        untrained = untrained_head(loaded.model, loaded.missing_keys)
        reason = no_loss or (f"the checkpoint has no trained {kind}-LM head ({len(untrained)} tensors newly initialised: "
                             f"{', '.join(untrained[:3])}{', ...' if len(untrained) > 3 else ''})" if untrained else None)
        by_variant[variant] = _variant_runs(
            loaded, budget, kind, reason, variant=variant, parameters=parameters, table=table, trained=trained,
            lengths=lengths, stride=stride, layers=layers, batch_size=batch_size, mask_rate=mask_rate,
            mask_id=getattr(tok, "mask_token_id", None), seed=seed, show_progress=show_progress, tiled=tiled)
        label = loaded.label
        del loaded
        gc.collect()
        return label, table

    # the scaled variants first: a model that ignores transformers' scaling is refused before any length has run
    for scaling in scalings:
        run(scaling)
    label, table = run()
    if extend_table:  # after the unscaled pass, which found the table's length
        if table is None or table >= lengths[-1]:
            warnings.warn(f"--extend-table: {label} has no learned position table to extend" if table is None else
                          f"--extend-table: the {table} positions of {label}'s table already cover every length", stacklevel=2)
        else:
            label, _ = run(extend_to=lengths[-1])
    unscaled = by_variant.pop("unscaled")
    extended = [r for name in list(by_variant) if name.startswith("interpolated:") for r in by_variant.pop(name)]
    records = unscaled + [r for runs in by_variant.values() for r in runs] + extended  # unscaled first, then as given
    return label, len(budget.tokens), records


def _variant_runs(loaded: Any, budget: TextBudget, declared: str | None, reason: str | None, *, variant: str,
                  parameters: dict[str, Any] | None, table: int | None, trained: int | None, lengths: list[int],
                  stride: int | None, layers: Any, batch_size: int, mask_rate: float, mask_id: int | None, seed: int,
                  show_progress: bool, tiled: bool = False) -> list[LengthRecord]:
    """One loaded model (one variant) at every length; ``reason``: why it has no loss (its windows are then not masked).

    ``table`` and ``trained`` are the variant's table length (``None``: none) and the model's training length.
    """
    from posviz.errors import OptionError
    from posviz.extrapolation.evaluate import model_refuses, run_length
    from posviz.scoring.layers import parse_layers
    from posviz.util.progress import count_progress

    chosen = sorted(set(layers)) if isinstance(layers, (list, tuple)) else parse_layers(None, layers, loaded.num_layers, loaded.label)
    if not chosen or any(not 0 <= x < loaded.num_layers for x in chosen):
        raise OptionError(f"{loaded.label} has layers 0-{loaded.num_layers - 1}, not {chosen}")
    kind = None if reason else declared  # what is scored
    common = dict(model=loaded.label, variant=variant, rope_scaling=parameters, training_length=trained, table_length=table, objective=declared,
                  protocol=protocol(kind, stride, mask_rate, seed), layout=budget.layout)
    out = []
    for length in lengths:
        if table is not None and length > table:
            out.append(LengthRecord(length=length, loss=None, **common,
                                    reason=f"longer than the model's learned position table ({table} positions)"))
            continue
        blocks = length_blocks(budget, length, objective=kind, stride=stride, mask_rate=mask_rate, mask_id=mask_id, seed=seed)
        try:
            with count_progress(len(blocks.inputs), f"{loaded.label} n={length}") as update:
                done = run_length(loaded.model, blocks, chosen, objective=kind, batch_size=batch_size,
                                  progress=update if show_progress else None, tiled=tiled)
        except (ValueError, IndexError, RuntimeError):
            why = model_refuses(loaded.model, blocks.inputs)
            if why is None:
                raise
            out.append(LengthRecord(length=length, loss=None, **common, reason=f"the model refuses length {length}: {why}"))
            continue
        loss = done.nll / done.tokens if kind is not None and done.tokens else None
        out.append(LengthRecord(length=length, loss=loss, reason=None if loss is not None else reason or "no token was scored",
                                tokens=done.tokens,
                                windows=done.windows, text_tokens=blocks.text_tokens, causal=done.causal,
                                heads=done.heads, position_nll=done.position_nll, position_tokens=done.position_tokens, **common))
    return out
