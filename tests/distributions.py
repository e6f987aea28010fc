"""Distributions laid out as pip installs them, for tests of entry-point plugins (schemes, measures)."""

from __future__ import annotations

import shutil
from pathlib import Path


def install(site: Path, name: str, entry_points: str, module: Path | None = None) -> None:
    """Lay out a distribution in ``site``: its package (if any) and ``NAME-VERSION.dist-info`` with ``entry_points``."""
    if module is not None:
        shutil.copytree(module, site / module.name)
    info = site / f"{name.replace('-', '_')}-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(entry_points)
    (info / "RECORD").write_text("")
