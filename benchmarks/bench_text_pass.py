"""Benchmark 17: ``posviz report --corpus`` (attention and hidden states on one text pass) against each section alone.

On the bundled all-MiniLM-L6-v2 (6 layers, 12 heads, hidden 384), a report with ``--no-albert`` and B blocks of
128 tokens of the demo corpus, run as whole processes and alternately:

* ``--corpus``: the attention section (every layer) and the hidden-states section, from one load and one pass;
* ``--attention-corpus`` alone;
* ``--hidden-corpus`` alone.

Target (issue 40): the report with both sections costs at most 1.15x the slower of the two alone. Before the text
pass, it cost the sum of the two (each section loaded the model and ran the blocks itself).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from harness import alternate, markdown_table, posviz_cmd

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
CORPUS = "cpython-3.11.7-docstrings"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--blocks", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    sizes = ["--attention-max-blocks", str(args.blocks), "--hidden-max-blocks", str(args.blocks), "--layers", "all"]
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "r.pdf")
        base = ["report", MODEL, "--no-albert", "-o", out, *sizes]
        commands = {
            "report --corpus (attention + hidden, one pass)": posviz_cmd(*base, "--corpus", CORPUS),
            "report --attention-corpus": posviz_cmd(*base, "--attention-corpus", CORPUS),
            "report --hidden-corpus": posviz_cmd(*base, "--hidden-corpus", CORPUS),
        }
        results = alternate(commands, args.repeats)
    print(markdown_table([m.row() for m in results.values()]))
    both, attention, hidden = results.values()
    slower = max(attention.wall, hidden.wall)
    print(f"\n{args.blocks} blocks of 128 tokens, MiniLM, every layer: both / slower alone = {both.wall / slower:.2f}x "
          f"(target <= 1.15x); both / sum of the two = {both.wall / (attention.wall + hidden.wall):.2f}x; CPU time "
          f"ratio {both.cpu / max(attention.cpu, hidden.cpu):.2f}x (user + system)")


if __name__ == "__main__":
    main()
