"""Lazy re-exports (PEP 562): a package names its public objects without importing the modules that define them.

``import posviz`` (and ``posviz --help``) stays fast because numpy, matplotlib and
torch load only when a name that needs them is first used.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Module-level ``__getattr__`` and ``__dir__`` for a package that re-exports names lazily.

    Parameters
    ----------
    package
        The package's ``__name__``.
    exports
        Public name -> module that defines it.

    Returns
    -------
    getattr, dir
        Assign them to the package's ``__getattr__`` and ``__dir__``. A name is
        imported on first use and then cached in the package's namespace.
    """

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(exports)

    return __getattr__, __dir__
