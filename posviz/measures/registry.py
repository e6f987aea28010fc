"""The registry of measures: posviz's own (:mod:`posviz.measures.builtin`) and those of other packages.

Another package registers a measure as an entry point of the group ``posviz.measures`` whose value names a
:class:`~posviz.measures.contract.Measure` (``my_package.module:MEASURE``); posviz declares its own there too, so
``importlib.metadata.entry_points(group="posviz.measures")`` lists every measure of an installation. Names are read
without importing anything (``posviz --help`` stays fast); a plugin is imported when it is asked for, and one that
fails says so in one line.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from posviz.errors import OptionError, PosvizError
from posviz.measures.contract import Measure

#: The entry-point group of measures.
GROUP = "posviz.measures"


class MeasurePluginError(PosvizError):
    """A measure registered by another package could not be imported, or is not a :class:`Measure`."""


def _entry_points() -> list[Any]:
    from importlib.metadata import entry_points

    return list(entry_points(group=GROUP))


def _built_in() -> dict[str, Measure]:
    from posviz.measures.builtin import BUILT_IN

    return {m.name: m for m in BUILT_IN}


def _foreign(ep: Any) -> bool:
    """Whether an entry point is another package's (posviz declares its own measures as entry points too)."""
    return not str(ep.value).startswith("posviz.measures.builtin:")


def measure_names() -> list[str]:
    """Every measure's name, posviz's first, without importing any measure (nor ``importlib.metadata``).

    ``posviz --help`` shows these. Importing ``importlib.metadata`` and scanning every distribution through it took
    about 55 ms, a quarter of the help's start-up (benchmark 2: target 0.3 s), so the names are read from the
    ``entry_points.txt`` files of the distributions on ``sys.path`` directly; loading a measure goes through
    ``importlib.metadata`` (:func:`get_measure`).
    """
    from posviz.measures.builtin import BUILT_IN_NAMES

    return [*BUILT_IN_NAMES, *sorted(_declared_names() - set(BUILT_IN_NAMES))]


def _declared_names() -> set[str]:
    """Names declared under :data:`GROUP` in the ``entry_points.txt`` of every ``.dist-info``/``.egg-info`` on sys.path."""
    import os
    import sys

    names: set[str] = set()
    for entry in sys.path:
        try:
            listing = os.scandir(entry or ".")
        except OSError:  # a zip file, a missing folder
            continue
        with listing:
            for d in listing:
                if not d.name.endswith((".dist-info", ".egg-info")):
                    continue
                try:
                    with open(os.path.join(d.path, "entry_points.txt"), encoding="utf-8") as f:
                        names |= _group_names(f.read())
                except OSError:
                    continue
    return names


def _group_names(text: str) -> set[str]:
    """The names of :data:`GROUP`'s entries in the text of an ``entry_points.txt`` (an INI file)."""
    names, inside = set(), False
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("["):
            inside = line == f"[{GROUP}]"
        elif inside and "=" in line and not line.startswith(("#", ";")):
            names.add(line.split("=", 1)[0].strip())
    return names


def _load(ep: Any) -> Measure:
    dist = getattr(getattr(ep, "dist", None), "name", None) or "another package"
    try:
        measure = ep.load()
    except Exception as e:  # a plugin's own failure, whatever it is, is one line naming the plugin
        raise MeasurePluginError(f"measure {ep.name!r} ({dist}, {ep.value}) failed to import: {type(e).__name__}: {e}",
                                 f"fix or uninstall {dist}") from None
    if not isinstance(measure, Measure):
        raise MeasurePluginError(f"measure {ep.name!r} ({dist}, {ep.value}) is a {type(measure).__name__}, not a posviz Measure")
    if measure.name != ep.name:
        raise MeasurePluginError(f"entry point {ep.name!r} ({dist}) names a measure called {measure.name!r}",
                                 "the entry point's name and the measure's must be the same")
    return replace(measure, origin=dist)


def get_measure(name: str, *, series: bool = False) -> Measure:
    """The measure called ``name`` (``series``: one that runs along checkpoints).

    Raises
    ------
    OptionError
        No measure has that name (the names are listed), or it has no series when ``series`` is asked for.
    MeasurePluginError
        Another package's measure of that name failed to import, or claims one of posviz's names.
    """
    built_in = _built_in()
    found = built_in.get(name)
    for ep in _entry_points():
        if ep.name != name or not _foreign(ep):
            continue
        if name in built_in:
            dist = getattr(getattr(ep, "dist", None), "name", None) or "another package"
            raise MeasurePluginError(f"{dist} registers a measure called {name!r}, a name of posviz's own",
                                     "rename the plugin's measure")
        found = _load(ep)
    along = [n for n in measure_names() if n not in built_in or built_in[n].has_series]
    if found is None:
        raise OptionError(f"unknown measure {name!r}", f"choose one of {', '.join(along if series else measure_names())}")
    if series and not found.has_series:
        raise OptionError(f"measure {name!r} has no series along checkpoints"
                          + (f" (it is {found.command})" if found.command else ""), f"choose one of {', '.join(along)}")
    return found


def measures() -> dict[str, Measure]:
    """Every measure by name: posviz's own, then those of installed packages (each imported)."""
    out = _built_in()
    for ep in _entry_points():
        if _foreign(ep):
            out[ep.name] = get_measure(ep.name)
    return out
