"""Independent reference computations the tests compare posviz against.

Written from the definitions, with explicit loops and dense matrices, and
deliberately sharing no code with posviz.
"""

from __future__ import annotations

import numpy as np


def assert_close(actual, desired, rtol: float, err_msg: str = "") -> None:
    """``np.testing.assert_allclose`` with an absolute tolerance scaled to the magnitude of ``desired``.

    ``atol = rtol * max|desired|``: entries near zero (an off-diagonal cosine, a profile crossing
    zero, a rounding residue of -3e-8) are held to the precision of the array they belong to,
    not to a relative precision of their own, which rounding cannot meet.
    """
    desired = np.asarray(desired, dtype=np.float64)
    scale = float(np.max(np.abs(desired))) if desired.size else 0.0
    np.testing.assert_allclose(actual, desired, rtol=rtol, atol=rtol * scale, err_msg=err_msg)


def dense_r2(p: np.ndarray, exclude_diagonal: bool = False) -> float:
    """Toeplitzness R^2 of a dense matrix: each diagonal replaced by its mean, then 1 - SSres/SStot."""
    n = p.shape[0]
    t = np.empty_like(p, dtype=np.float64)
    for k in range(-(n - 1), n):
        idx = np.arange(max(0, -k), min(n, n - k))
        t[idx, idx + k] = p[idx, idx + k].mean()
    mask = ~np.eye(n, dtype=bool) if exclude_diagonal else np.ones((n, n), dtype=bool)
    resid = np.sum((p - t)[mask] ** 2)
    tot = np.sum((p[mask] - p[mask].mean()) ** 2)
    return float(1 - resid / tot)


def dense_toeplitzness(e: np.ndarray, exclude_diagonal: bool = False) -> float:
    """R^2 of P = E E^T, building P."""
    e = np.asarray(e, dtype=np.float64)
    return dense_r2(e @ e.T, exclude_diagonal)


def pdf_outline(reader) -> list[tuple[str, int, int]]:
    """A pypdf reader's outline as (title, depth, page index)."""
    out: list[tuple[str, int, int]] = []

    def walk(items, depth):
        for it in items:
            if isinstance(it, list):
                walk(it, depth + 1)
            else:
                out.append((it.title, depth, reader.get_destination_page_number(it)))

    walk(reader.outline, 0)
    return out


def token_blocks_and_hf_hidden_states(model_dir, blocks: int = 5, n: int = 24):
    """Seeded random token blocks of a BERT vocabulary ([CLS] first, [SEP] last) and the hidden states that
    transformers' own model returns for them (every layer, an all-ones mask): the reference of hidden-state measures."""
    import torch
    from transformers import AutoModel

    ids = np.random.default_rng(0).integers(1000, 20000, size=(blocks, n))
    ids[:, 0], ids[:, -1] = 101, 102
    model = AutoModel.from_pretrained(model_dir).eval()
    with torch.inference_mode():
        states = model(torch.as_tensor(ids), attention_mask=torch.ones(ids.shape, dtype=torch.long),
                       output_hidden_states=True).hidden_states
    return ids, states
