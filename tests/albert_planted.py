"""Eight tiny ALBERT checkpoints with planted E_P, for a fake offline HF cache of the ALBERT v1/v2 hub ids.

Every checkpoint is a real ALBERT (512 positions x 128, the real E_P shape) saved
with ``save_pretrained``, with a planted E_P = w * sinusoidal + (1 - w) * noise. The
expected Toeplitzness of each is computed here with the dense definition, not with
posviz. The planted weights make v2 more Toeplitz than v1 for base, large and xlarge,
and less for xxlarge, so that both arrow directions are exercised. Fixtures using
these (``planted``, ``albert_cache``, ``empty_albert_cache``) are in ``conftest.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tests.checkpoint_factory import build_tiny_checkpoint
from tests.reference import dense_toeplitzness

N, D = 512, 128
SIZES = ("base", "large", "xlarge", "xxlarge")
#: Weight of the sinusoidal part of each planted E_P.
WEIGHTS = {
    ("base", "v1"): 0.30, ("base", "v2"): 0.60,
    ("large", "v1"): 0.40, ("large", "v2"): 0.70,
    ("xlarge", "v1"): 0.50, ("xlarge", "v2"): 0.80,
    ("xxlarge", "v1"): 0.90, ("xxlarge", "v2"): 0.85,
}
#: Published ALBERT numbers (google-research/albert README), for the metric checks.
AVERAGE = {("base", "v1"): 80.1, ("base", "v2"): 82.3, ("large", "v1"): 82.4, ("large", "v2"): 85.7,
           ("xlarge", "v1"): 85.5, ("xlarge", "v2"): 87.9, ("xxlarge", "v1"): 91.0, ("xxlarge", "v2"): 90.9}
RACE = {("base", "v1"): 64.0, ("base", "v2"): 66.8, ("large", "v1"): 68.5, ("large", "v2"): 75.2,
        ("xlarge", "v1"): 74.8, ("xlarge", "v2"): 80.7, ("xxlarge", "v1"): 86.5, ("xxlarge", "v2"): 86.8}
SQUAD1 = {("base", "v1"): (89.3, 82.3), ("base", "v2"): (90.2, 83.2), ("large", "v1"): (90.6, 83.9), ("large", "v2"): (91.8, 85.2),
          ("xlarge", "v1"): (92.5, 86.1), ("xlarge", "v2"): (92.9, 86.4), ("xxlarge", "v1"): (94.8, 89.3), ("xxlarge", "v2"): (94.6, 89.1)}


def hub_id(size: str, version: str) -> str:
    return f"albert/albert-{size}-{version}"


@dataclass
class Planted:
    folder: Path
    e: np.ndarray  # float64 copy of the stored float32 E_P
    full: float
    offdiag: float


def _sinusoidal(n: int, d: int) -> np.ndarray:
    pos = np.arange(n)[:, None]
    freq = 10000.0 ** (-np.arange(0, d, 2) / d)
    out = np.empty((n, d))
    out[:, 0::2], out[:, 1::2] = np.sin(pos * freq), np.cos(pos * freq)
    return out


def plant(folder: Path, w: float, seed: int, *, build: bool = True) -> Planted:
    """One tiny ALBERT whose E_P is ``w`` sinusoidal and ``1 - w`` Gaussian noise, saved in ``folder`` (``build``) or
    already there."""
    e = (w * _sinusoidal(N, D) + (1 - w) * np.random.default_rng(seed).normal(size=(N, D))).astype(np.float32)
    if build:
        build_tiny_checkpoint("albert", folder, seed=seed, max_position_embeddings=N, embedding_size=D,
                              plant={"embeddings.position_embeddings.weight": e})
    e64 = e.astype(np.float64)
    return Planted(folder, e64, dense_toeplitzness(e64), dense_toeplitzness(e64, exclude_diagonal=True))


def plant_all(root: Path, *, build: bool = True) -> dict[tuple[str, str], Planted]:
    """All eight, keyed by ``(size, version)`` (``build``: saved in ``root`` now; else already there)."""
    return {key: plant(root / f"{key[0]}-{key[1]}", w, seed, build=build) for seed, (key, w) in enumerate(WEIGHTS.items())}
