"""``posviz measures``: every measure of the registry, posviz's own and those other packages register."""

from __future__ import annotations

from typing import Annotated

import typer

from posviz.cli.options import OutputFormat


def command(
    fmt: Annotated[OutputFormat, typer.Option("--format", "-f", help="table, or the registry's records as json or csv.")] = OutputFormat.table,
) -> None:
    """List the measures: what each needs from a model, what it reads, where it shows, and who registered it.

    Another package adds a measure under the entry-point group posviz.measures (docs/extending.md); it then runs
    along checkpoints with posviz trajectory --measure NAME, on one model with posviz measure NAME MODEL, and a measure
    on text (text_pass in json/csv) also in posviz report and posviz explore with --measure NAME, on the same pass as
    attention and hidden.
    """
    from posviz.measures import measures
    from posviz.util.tables import emit, to_csv, to_json

    rows = [{"name": m.name, "needs": m.needs, "reads": ", ".join(m.reads), "trajectory": m.has_series,
             "text_pass": m.request is not None,
             "command": m.command or (f"posviz measure {m.name}" if m.request or m.point else ""),
             "origin": m.origin, "summary": m.summary} for m in measures().values()]
    if fmt.value == "json":
        emit(to_json(rows), None)
    elif fmt.value == "csv":
        emit(to_csv(rows), None)
    else:
        cells = [("measure", "needs", "series", "command", "from: what it measures")]
        cells += [(r["name"], r["needs"], "trajectory" if r["trajectory"] else "", r["command"] or "—", f"{r['origin']}: {r['summary']}")
                  for r in rows]
        widths = [max(len(c[i]) for c in cells) for i in range(4)]
        emit("".join("  ".join(c[i].ljust(widths[i]) for i in range(4)) + "  " + c[4] + "\n" for c in cells), None)
