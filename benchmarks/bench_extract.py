"""Benchmark 1: extraction + score, posviz vs the usual transformers script.

Makes a GPT-2-medium-shaped checkpoint (1024 positions, 24 layers, hidden 1024;
random weights, ~1.4 GB of float32 safetensors) once as a single file and once
sharded, then runs, as whole processes and alternately:

* ``posviz toeplitzness CKPT --format json`` (10-draw null baseline included);
* the script a user would write instead: ``AutoModel.from_pretrained`` then P and
  R² with numpy (no null baseline, so the comparison favours the script);
* the floor: a Typer command with the same parameters that only imports numpy, what any Typer CLI scoring with
  numpy pays before it reads a byte (the speed-up against it bounds what posviz could reach).

Also checks that posviz does not import torch for safetensors checkpoints.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from harness import alternate, posviz_cmd

USUAL_SCRIPT = r"""
import sys
import numpy as np
from transformers import AutoModel
model = AutoModel.from_pretrained(sys.argv[1])
E = model.get_input_embeddings  # noqa: keep the usual attribute walk honest
E = model.wpe.weight.detach().double().numpy()
P = E @ E.T
n = P.shape[0]
i, j = np.indices((n, n))
idx = (j - i + n - 1).ravel()
means = np.bincount(idx, weights=P.ravel(), minlength=2 * n - 1) / np.bincount(idx, minlength=2 * n - 1)
T = means[idx].reshape(n, n)
r2 = 1 - ((P - T) ** 2).sum() / ((P - P.mean()) ** 2).sum()
print(r2)
"""


def make_checkpoints(work: Path) -> dict[str, Path]:
    """Build (once) the single-file and sharded GPT-2-medium-shaped checkpoints."""
    out = {"single": work / "gpt2-medium-shaped", "sharded": work / "gpt2-medium-shaped-sharded"}
    if all((p / "config.json").exists() for p in out.values()):
        return out
    import torch
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    cfg = GPT2Config(n_positions=1024, n_embd=1024, n_layer=24, n_head=16)
    model = GPT2Model(cfg)
    model.save_pretrained(out["single"], max_shard_size="10GB")
    model.save_pretrained(out["sharded"], max_shard_size="200MB")
    return out


# The floor under any Typer command that scores with numpy: the interpreter, Typer (which, since it coerces values
# through pydantic, builds a TypeAdapter per parameter of the invoked command) and numpy, for a command with the
# parameters of `posviz toeplitzness` (same types and defaults) that then does nothing. No reading, no scoring.
FLOOR_SCRIPT = r"""
import enum
from pathlib import Path
from typing import Annotated
import typer

class Fmt(str, enum.Enum):
    table = "table"
    json = "json"

app = typer.Typer()

@app.command()
def toeplitzness(
    models: Annotated[list[str], typer.Argument()] = None,
    fmt: Annotated[Fmt, typer.Option("--format", "-f")] = Fmt.table,
    output: Annotated[Path | None, typer.Option("--output", "-o")] = None,
    exclude_diagonal: Annotated[bool, typer.Option("--exclude-diagonal/--full")] = True,
    null_draws: Annotated[int, typer.Option("--null-draws", min=0)] = 10,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    normalize: Annotated[Fmt, typer.Option("--normalize")] = Fmt.table,
    positions: Annotated[str | None, typer.Option("--positions")] = None,
    table: Annotated[str | None, typer.Option("--table")] = None,
    plot_vs_glue: Annotated[bool, typer.Option("--plot-vs-glue")] = False,
    metric: Annotated[Fmt, typer.Option("--metric")] = Fmt.table,
    score: Annotated[list[str] | None, typer.Option("--score")] = None,
    allow_missing: Annotated[bool, typer.Option("--allow-missing")] = False,
    no_cache: Annotated[bool, typer.Option("--no-cache")] = False,
    run: Annotated[list[Path] | None, typer.Option("--run")] = None,
    run_metric: Annotated[Fmt, typer.Option("--run-metric")] = Fmt.table,
) -> None:
    import numpy  # noqa: F401

app()
"""


def torch_imported(ckpt: Path) -> bool:
    code = (
        "import sys\nfrom typer.testing import CliRunner\nfrom posviz.cli.app import app\n"
        f"r = CliRunner().invoke(app, ['toeplitzness', {str(ckpt)!r}, '-f', 'json', '--no-cache'])\n"
        "assert r.exit_code == 0, r.output\nprint('torch' in sys.modules)\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "True"


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--work", type=Path, default=Path(__file__).parent / "work")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    script = args.work / "usual_script.py"
    script.write_text(USUAL_SCRIPT)
    floor = args.work / "typer_floor.py"
    floor.write_text(FLOOR_SCRIPT)
    rows = []
    for label, ckpt in make_checkpoints(args.work).items():
        size = sum(f.stat().st_size for f in ckpt.glob("*.safetensors")) / 2**30
        # --no-cache: measure reading and scoring, not the score cache (a repeat run is the cached row below)
        res = alternate(
            {
                "posviz": posviz_cmd("toeplitzness", str(ckpt), "--format", "json", "--no-cache"),
                "usual": [sys.executable, str(script), str(ckpt)],
                "cached": posviz_cmd("toeplitzness", str(ckpt), "--format", "json"),
                "floor": [sys.executable, str(floor), str(ckpt), "--format", "json", "--no-cache"],
            },
            args.repeats,
        )
        u = res["usual"]
        for name, what in (("posviz", "read + score"), ("cached", "repeat run, score cache"),
                           ("floor", "floor: a Typer command with these options importing numpy, doing nothing")):
            p = res[name]
            rows.append(
                {
                    "benchmark": f"1. extract+score, {label} ({size:.2f} GB): {what}",
                    "posviz wall s (min–max)": f"{p.wall:.2f} ({min(p.walls):.2f}–{max(p.walls):.2f})",
                    "usual wall s (min–max)": f"{u.wall:.2f} ({min(u.walls):.2f}–{max(u.walls):.2f})",
                    "speed-up": f"{u.wall / p.wall:.1f}×",
                    "posviz peak MiB": f"{p.peak:.0f}",
                    "usual peak MiB": f"{u.peak:.0f}",
                    "memory ratio": f"{u.peak / p.peak:.1f}×",
                    "torch imported": str(torch_imported(ckpt)) if name != "floor" else "–",
                }
            )
    return rows


if __name__ == "__main__":
    from harness import markdown_table

    print(markdown_table(main()))
