"""``--extend-table``: a learned absolute position table stretched to a longer length by linear interpolation.

A model with a learned table of T positions cannot index position T or beyond.
Position interpolation (as for RoPE by Chen et al., 2023, and for the position
tables of vision transformers) gives it N > T rows instead: row i of the new table
is the old table read at position i (T - 1) / (N - 1), linearly interpolated
between the two nearest rows (``torch.nn.functional.interpolate``, ``align_corners``:
the first and last rows stay as they were). Every position is then compressed by
(T - 1) / (N - 1), within the trained length too, which is what the variant measures.
Rows before the first position (RoBERTa's padding rows, OPT's two offset rows)
are kept as they are.

The model is rebuilt from its config with the longer length, so that whatever the
architecture derives from that length (``position_ids`` buffers, GPT-2's causal
mask in transformers 4.x, TUPE's bucket ids) has the new size; every weight is
copied over, the table replaced by its interpolation. A weight other than the
table whose shape depends on the length is refused.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from posviz.errors import UnsupportedModelError

#: Config fields that hold the declared length, by family (the first one present is changed).
LENGTH_FIELDS = ("max_position_embeddings", "n_positions")


@dataclass(frozen=True)
class TableExtension:
    """The interpolated variant of a model whose learned table has ``table`` positions, stretched to ``length``."""

    table: int
    length: int

    @property
    def label(self) -> str:
        """The variant's name in outputs: ``interpolated:N``."""
        return f"interpolated:{self.length}"

    def parameters(self) -> dict[str, Any]:
        """What was done, for the records."""
        return {"type": "linear interpolation of the learned table", "from_positions": self.table, "to_positions": self.length}


def _table_key(state: Mapping[str, Any], suffix: str) -> str:
    keys = [k for k in state if k == suffix or k.endswith("." + suffix)]
    if len(keys) != 1:
        raise UnsupportedModelError(f"cannot find the one position table ending in {suffix!r} in the model ({len(keys)} found)")
    return keys[0]


def interpolate_rows(table: Any, length: int) -> Any:
    """``table`` ``(T, d)`` read at ``length`` evenly spaced positions from its first to its last row (linear)."""
    import torch
    import torch.nn.functional as F

    rows = table.detach().to(torch.float64).T[None]  # (1, d, T): interpolate along positions
    return F.interpolate(rows, size=length, mode="linear", align_corners=True)[0].T.to(table.dtype)


def interpolate_table(model: Any, config: Mapping[str, Any], length: int) -> Any:
    """A copy of ``model`` (in eval mode, on its device) whose learned table has ``length`` positions.

    Parameters
    ----------
    model
        A loaded Hugging Face model (or posviz run) with one learned absolute table.
    config
        Its config as a dict (finds the family, the table and its row offset).
    length
        The positions of the new table; more than the old one has.

    Raises
    ------
    UnsupportedModelError
        No single learned table, or another weight whose shape depends on the length.
    """
    from posviz.read.families import family_for_config

    family = family_for_config(config)
    if family.scheme != "learned" or len(family.tables) != 1 or family.tables[0].fixed:
        raise UnsupportedModelError(f"--extend-table needs one learned position table; {family.name} models have "
                                    f"{'none' if family.scheme != 'learned' or family.tables[0].fixed else len(family.tables)}")
    offset = family.row_offset(config)
    state = model.state_dict()
    key = _table_key(state, family.tables[0].suffix)
    old = state[key]
    positions = old.shape[0] - offset
    if length <= positions:
        raise UnsupportedModelError(f"--extend-table: the table already has {positions} positions (asked for {length})")
    import torch

    field = next((f for f in LENGTH_FIELDS if getattr(model.config, f, None) is not None), None)
    if field is None:
        raise UnsupportedModelError(f"--extend-table: the config declares no length ({' or '.join(LENGTH_FIELDS)})")
    cfg = copy.deepcopy(model.config)
    setattr(cfg, field, getattr(cfg, field) + length - positions)  # offset rows stay where they are
    param = next(iter(model.parameters()))
    longer = type(model)(cfg).to(dtype=param.dtype)
    names = {n for n, _ in longer.named_parameters(remove_duplicate=False)}
    target = longer.state_dict()
    kept = {}
    for k, v in state.items():
        if k == key:
            v = torch.cat([old[:offset], interpolate_rows(old[offset:], length)])
        elif k in target and target[k].shape != v.shape:
            if k in names:
                raise UnsupportedModelError(f"--extend-table: {k} also depends on the table's length")
            continue  # a buffer computed from the length: the rebuilt model's own is the right size
        kept[k] = v
    missing, unexpected = longer.load_state_dict(kept, strict=False)
    buffers = {n for n, _ in longer.named_buffers()}
    if unexpected or set(missing) - buffers:
        raise UnsupportedModelError(f"--extend-table could not carry every weight over (missing {sorted(set(missing) - buffers)[:3]}, "
                                    f"unexpected {sorted(unexpected)[:3]})")
    return longer.to(param.device).eval()
