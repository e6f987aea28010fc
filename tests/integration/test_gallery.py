"""The shipped gallery is what today's code makes (reports/MANIFEST.json and scripts/gallery.py).

Every file under reports/ is in the manifest with the recipe that makes it; no source file a recipe depends on
has changed since the commit that made (or, for the hours-long experiments, reran and verified) its files; and
the quick outputs are remade here and compared with the committed ones.

Everything is judged as committed at HEAD (``gallery.committed_root``), not as the work tree holds it: a user's
``make gallery`` on another machine, or any command that rewrote a shipped file, does not turn the suite red; a stale
commit still does, since a fresh clone's work tree is that commit.
"""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import made_once
from tests.script_runs import load_script

ROOT = Path(__file__).resolve().parents[2]


def _load_gallery():
    return load_script(ROOT / "scripts" / "gallery.py", "posviz_gallery")


gallery = _load_gallery()
recipes = sys.modules["gallery_recipes"]  # the recipes, their groups of sources and their remakes (imported by gallery)
text = load_script(ROOT / "scripts" / "gallery_text.py", "posviz_gallery_text")  # the comparisons of shipped text
COMMITTED = gallery.committed_root()
MANIFEST = gallery.load_manifest(COMMITTED)


def test_every_shipped_file_is_current():
    """No file outside a recipe, no file changed since it was recorded, no dependency changed since it was made."""
    stale = gallery.problems(MANIFEST, COMMITTED)
    assert not stale, "the gallery is stale (make gallery remakes it):\n" + gallery.describe(stale)


def test_every_recipe_records_how_and_from_what_it_was_made():
    for recipe in gallery.RECIPES:
        entry = MANIFEST["outputs"][recipe.name]
        assert len(entry["commit"]) == 40 and entry["posviz_version"] and entry["command"] == recipe.command
        assert entry["files"] and entry["depends_on"], recipe.name
        if recipe.kind != "prose":
            assert entry["inputs"] and all(len(h) == 64 for h in entry["inputs"].values()), recipe.name


def test_a_changed_dependency_names_the_stale_files_and_the_command_that_remakes_them():
    manifest = copy.deepcopy(MANIFEST)
    entry = manifest["outputs"]["training-report"]
    changed, added = sorted(entry["depends_on"])[:2]
    entry["depends_on"][changed] = "0" * 64
    del entry["depends_on"][added]
    entry["depends_on"]["posviz/report/gone.py"] = "0" * 64
    entry["files"]["reports/training-report.pdf"] = "0" * 64
    stale = gallery.problems(manifest, COMMITTED)
    assert set(stale) - set(gallery.problems(MANIFEST, COMMITTED)) <= {"training-report"}
    text = gallery.describe({"training-report": stale["training-report"]}, limit=10_000)
    made = entry["commit"][:10]
    assert f"{changed} changed since {made}, which made it" in text
    assert f"{added} was added since {made}" in text and f"posviz/report/gone.py was removed since {made}" in text
    assert "reports/training-report.pdf differs from the file recorded" in text
    assert f"remake: make gallery, or: {gallery.BY_NAME['training-report'].command}" in text


def test_every_module_of_the_corpus_passes_is_a_dependency_of_its_recipes():
    # recipes depend on posviz attention's half of posviz/observe or on posviz hidden's; a new module (or C source of
    # a compiled kernel) in neither would change shipped numbers without making them stale
    listed = set(gallery.expand(recipes.OBSERVE_ATTENTION)) | set(gallery.expand(recipes.OBSERVE_HIDDEN))
    assert set(gallery.expand(["posviz/observe/**/*.py", "posviz/observe/**/*.c"])) == listed
    assert "posviz/observe/tiled/native_kernel.c" in listed


@pytest.mark.parametrize(("recipe", "pilot"), [("length-generalisation-pilot", "LG_PILOT"),
                                               ("length-generalisation-size-pilot", "LG_SIZE_PILOT")])
def test_the_pilot_recipe_command_is_made_from_the_pilot_budgets(recipe, pilot):
    """One clause per budget of LG_PILOT (LG_SIZE_PILOT), with every argument of it and its own results folder: a
    budget added or changed there is in the command a user reads, with no copy of it to keep in step."""
    budgets = getattr(recipes, pilot)
    command = recipes.BY_NAME[recipe].command
    clauses = command.split(", and ")
    assert len(clauses) == len(budgets)
    for clause, (name, args) in zip(clauses, budgets.items(), strict=True):
        assert f"{' '.join(args)} --results {recipes.LG}/pilot/{name} (" in clause
    # a rerun of one of its runs takes the budget's size and steps
    assert recipes._budget(budgets[next(iter(budgets))])[:2] == (["--size", "2x64"] if "SIZE" in pilot else ["--steps", "1000"])


def test_a_rerun_s_rows_are_compared_with_the_shipped_ones_number_by_number(tmp_path):
    """compare_rows (the verify of the hidden-state recipes): the shipped rows of one run agree with themselves, and a
    number moved past the tolerance, or a layer missing, is a disagreement (CalledProcessError: nothing recorded)."""
    import csv

    shipped = "reports/hidden-schemes/hidden-schemes.csv"
    with open(ROOT / shipped, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    mine = [r for r in rows if (r["scheme"], r["seed"]) == ("alibi", "0")]
    assert len(mine) >= 2

    def write(name, records):
        path = tmp_path / name
        with open(path, "w", encoding="utf-8", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(records)
        return path

    lines = recipes.compare_rows(shipped, write("same.csv", mine), {"scheme": "alibi", "seed": "0"})
    assert "positional_share: 0" in "\n".join(lines)
    near = [dict(r, positional_share=float(r["positional_share"]) * (1 + 1e-4)) for r in mine]
    assert "over the tolerance" not in "\n".join(recipes.compare_rows(shipped, write("near.csv", near), {"scheme": "alibi", "seed": "0"}))
    # the order probe's accuracy counts test pairs: two of its 1024 may flip (0.00195), three may not
    flipped = [dict(r, probe_order_accuracy=float(r["probe_order_accuracy"]) + 2 / 1024) for r in mine]
    assert "over the tolerance" not in "\n".join(recipes.compare_rows(shipped, write("two.csv", flipped), {"scheme": "alibi", "seed": "0"}))
    three = [dict(r, probe_order_accuracy=float(r["probe_order_accuracy"]) + 3 / 1024) for r in mine]
    moved = [dict(r, probe_mae=float(r["probe_mae"]) * 1.01) for r in mine]
    for records in (moved, three, mine[1:]):
        with pytest.raises(subprocess.CalledProcessError):
            recipes.compare_rows(shipped, write("bad.csv", records), {"scheme": "alibi", "seed": "0"})


def test_a_recipe_missing_from_the_manifest_is_stale():
    manifest = copy.deepcopy(MANIFEST)
    del manifest["outputs"]["minilm-demo"]
    assert gallery.problems(manifest, COMMITTED)["minilm-demo"] == ["minilm-demo is not in reports/MANIFEST.json"]


def test_record_refuses_a_recipe_that_a_command_makes():
    proc = subprocess.run([sys.executable, "scripts/gallery.py", "record", "training-report"], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: training-report is made by a command")


@pytest.fixture()
def clone(tmp_path) -> Path:
    """A clone of the last commit, with today's scripts/gallery.py in it."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the work tree is the only tree")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True, capture_output=True)
    shutil.copy(ROOT / "scripts/gallery.py", clone / "scripts/gallery.py")  # today's tool, on the last commit
    return clone


def test_the_check_judges_the_commit_not_a_file_rewritten_in_the_work_tree(clone):
    """A command that rewrites a shipped file in the work tree (``make gallery`` on a machine whose last float bits
    differ) changes nothing that ``gallery.py check`` says; ``check --work-tree`` names the file."""

    def check(*extra):
        r = subprocess.run([sys.executable, "scripts/gallery.py", "check", *extra], cwd=clone, capture_output=True, text=True)
        return r.returncode, r.stdout, r.stderr

    before = check()
    shipped = clone / "reports/minilm-toeplitzness.json"
    shipped.write_text(shipped.read_text(encoding="utf-8").replace("0.", "0.0", 1), encoding="utf-8")
    assert check() == before
    code, _, err = check("--work-tree")
    assert code == 1 and "reports/minilm-toeplitzness.json differs from the file recorded" in err


def test_adopt_records_files_made_elsewhere_with_the_dependencies_of_the_commit_that_made_them(clone):
    """``adopt``: files a slow recipe's command made on another machine are recorded as made at the named commit (its
    dependencies hashed as they were there), so a later change to a dependency makes them stale; it refuses what it
    cannot vouch for."""

    def gallery_cli(*args):
        return subprocess.run([sys.executable, "scripts/gallery.py", *args], cwd=clone, capture_output=True, text=True)

    script = "scripts/length_generalisation.py"
    older = subprocess.run(["git", "log", "-2", "--format=%H", "--", script], cwd=clone, capture_output=True, text=True,
                           check=True).stdout.split()[-1]  # a commit at which the script differed from HEAD's
    r = gallery_cli("adopt", "length-generalisation-runs", "--made-at", older, "--machine", "one test GPU")
    assert r.returncode == 0, r.stderr
    entry = gallery.load_manifest(clone)["outputs"]["length-generalisation-runs"]
    then = subprocess.run(["git", "show", f"{older}:{script}"], cwd=clone, capture_output=True, check=True).stdout
    import hashlib

    assert entry["commit"] == older and entry["made_on"] == "one test GPU"
    assert entry["depends_on"][script] == hashlib.sha256(then).hexdigest() != gallery.sha256(clone / script)
    assert entry["inputs"]["task copy: test examples"] == "00c0b5bb5619012e09fcbe682d550b420b4258afcacf502839d92bb30916fe99"
    r = gallery_cli("check", "--work-tree")  # stale, for the dependencies that changed since (the script among them)
    assert r.returncode == 1 and "length-generalisation-runs is stale" in r.stderr
    # every reason, not the CLI's listing (it elides past six lines, and which six depends on what moved since)
    reasons = gallery.problems(gallery.load_manifest(clone), clone)["length-generalisation-runs"]
    assert f"{script} changed since {older[:10]}, which made it" in reasons
    assert gallery_cli("adopt", "length-generalisation-tables", "--made-at", older, "--machine", "x").returncode == 2  # quick
    r = gallery_cli("adopt", "length-generalisation-runs", "--made-at", "nope", "--machine", "x")
    assert r.returncode == 2 and "not a commit" in r.stderr


@pytest.mark.parametrize(("a", "b", "agree"), [
    ("0.4742200124791086", "0.4742200124791087", True),  # one computation printed in full on two machines
    ("0.4742", "0.4743", True),  # {:.4f} of two values 1e-15 apart on either side of a rounding boundary
    ("0.4742", "0.4744", False),
    ("0.5", "0.52", False),  # two formats: no rounding slack
    ("256", "257", False),  # integers exactly
    ("256", "256.0", True),
    ("0.0", "1e-13", True),  # within the absolute tolerance
    ("0.0", "1e-10", False),
    ("nan", "nan", True),
    ("nan", "0.5", False),
])
def test_printed_numbers_agree_by_the_stated_policy(a, b, agree):
    assert text.numbers_agree(a, b) is agree and text.numbers_agree(b, a) is agree


def test_texts_and_json_are_compared_number_by_number():
    assert text.text_differs("R2 0.4742 over 256 blocks\n", "R2 0.4743 over 256 blocks") is None
    assert text.text_differs("R2 0.4742 over 256 blocks", "R2 0.4742 over 257 blocks").startswith("line 1")
    assert text.text_differs("R2 0.4742 of MiniLM", "R2 0.4742 of BERT").startswith("line 1")
    assert text.text_differs("a\nb", "a").endswith("2 lines != 1 lines")
    assert text.json_differences('{"r2": 0.4742200124791086, "n": 3}', '{"r2": 0.4742200124791087, "n": 3}') == []
    # JSON is written in full: a short float has no rounding slack there
    assert text.json_differences('{"accuracy": 49.95}', '{"accuracy": 50.0}') == [".accuracy: 49.95 != 50.0"]
    assert text.json_differences('{"n": 3}', '{"n": 4}') == [".n: 3 != 4"]
    assert text.json_differences('{"a": [1, "x"]}', '{"a": [1, "y"]}') == [".a[1]: 'x' != 'y'"]


# --- the quick outputs, remade here -----------------------------------------------------------------------------


def _pixels(path: Path) -> np.ndarray:
    from PIL import Image

    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"), dtype=np.float64)


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def assert_same_output(remade: Path, shipped: Path, same_renderer: str | None = None) -> None:
    """``remade`` shows what ``shipped`` shows: text and JSON number by number (the gallery's float policy,
    ``text.numbers_agree``), PDF pages' text, PNG pixels.

    ``same_renderer`` is None when the files were drawn by the matplotlib and pypdfium2 releases running here;
    otherwise it says which drew them. Then a PDF page's numbers must still agree, but its other text (glyphs of
    mathtext legends) and the pixels of a PNG may differ, and the pixel check is skipped.
    """
    suffix = shipped.suffix
    if suffix in (".txt", ".md", ".csv"):
        why = text.text_differs(remade.read_text(encoding="utf-8"), shipped.read_text(encoding="utf-8"))
        assert why is None, f"{shipped}: {why}"
    elif suffix == ".json":
        differences = text.json_differences(remade.read_text(encoding="utf-8"), shipped.read_text(encoding="utf-8"))
        assert not differences, f"{shipped}: " + "; ".join(differences[:5])
    elif suffix == ".pdf":
        from pypdf import PdfReader

        new, old = PdfReader(remade), PdfReader(shipped)
        assert len(new.pages) == len(old.pages), shipped
        for i, (a, b) in enumerate(zip(new.pages, old.pages, strict=True)):
            if same_renderer is None:
                why = text.text_differs(a.extract_text(), b.extract_text())
                assert why is None, f"{shipped}, page {i + 1}: {why}"
            else:
                new, old = _NUMBER.findall(a.extract_text()), _NUMBER.findall(b.extract_text())
                assert len(new) == len(old) and all(map(text.numbers_agree, new, old)), f"{shipped}, page {i + 1}"
    elif suffix == ".png":
        if same_renderer is not None:
            pytest.skip(f"{shipped.name}: pixels not compared: {same_renderer}")
        a, b = _pixels(remade), _pixels(shipped)
        assert a.shape == b.shape, f"{shipped}: {a.shape} != {b.shape}"
        # Antialiasing may differ between matplotlib/FreeType releases; a changed number, line or colour does not
        # hide in this: it moves far more than 0.5% of the pixels by more than a tenth of the range.
        moved = np.mean(np.abs(a - b).max(axis=2) > 25.5)
        assert moved <= 0.005, f"{shipped}: {moved:.2%} of the pixels differ"
    else:
        pytest.fail(f"{shipped}: no comparison for {suffix} files")


def renderer_differs(recipe: str) -> str | None:
    """None when this environment has the matplotlib and pypdfium2 that drew ``recipe``; else what differs."""
    recorded, here = MANIFEST["outputs"][recipe].get("renderer", {}), gallery.renderer()
    if recorded == here:
        return None
    return (f"drawn with {', '.join(f'{k} {v}' for k, v in recorded.items())}; this environment has "
            f"{', '.join(f'{k} {v}' for k, v in here.items())}")


@pytest.fixture(scope="module")
def demo_remade(tmp_path_factory) -> Path:
    epoch = MANIFEST["outputs"]["minilm-demo"]["source_date_epoch"]
    return made_once(tmp_path_factory, "minilm-demo", lambda out: recipes.make_minilm_demo(out, epoch))


@pytest.mark.parametrize("shipped", gallery.expand(gallery.BY_NAME["minilm-demo"].files, COMMITTED))
def test_the_minilm_demo_is_what_todays_code_makes(demo_remade, shipped):
    assert_same_output(demo_remade / Path(shipped).name, COMMITTED / shipped, renderer_differs("minilm-demo"))


@pytest.fixture(scope="module")
def tables_remade(tmp_path_factory) -> Path:
    def make(out: Path) -> None:  # from the committed tree, with today's script: the tables name the runs by their relative folder
        subprocess.run([sys.executable, str(ROOT / "scripts/tisa_table3_tabulate.py"), "--out", "reports/tisa-table3/runs",
                        "--results", str(out)], cwd=COMMITTED, check=True, capture_output=True)

    return made_once(tmp_path_factory, "tisa-table3", make)


@pytest.mark.parametrize("shipped", gallery.expand(gallery.BY_NAME["tisa-table3-tables"].files, COMMITTED))
def test_the_table3_tables_are_what_todays_code_makes(tables_remade, shipped):
    assert_same_output(tables_remade / Path(shipped).name, COMMITTED / shipped, renderer_differs("tisa-table3-tables"))


@pytest.fixture(scope="module")
def tstl_remade(tmp_path_factory) -> Path:
    """The train-short-test-long tables from the committed per-run results, written to a scratch folder."""
    def make(out: Path) -> None:
        shutil.copytree(COMMITTED / recipes.TSTL / "runs", out / "runs")
        subprocess.run([sys.executable, "scripts/train_short_test_long.py", "--phase", "tabulate", "--results", str(out)],
                       cwd=ROOT, check=True, capture_output=True, env={**os.environ, "MPLBACKEND": "Agg"})

    return made_once(tmp_path_factory, "train-short-test-long", make)


@pytest.mark.parametrize("shipped", gallery.expand(gallery.BY_NAME["train-short-test-long-tables"].files, COMMITTED))
def test_the_train_short_test_long_tables_are_what_todays_code_makes(tstl_remade, shipped):
    assert_same_output(tstl_remade / Path(shipped).name, COMMITTED / shipped,
                       renderer_differs("train-short-test-long-tables"))


# --- the console examples of the docs -----------------------------------------------------------------------------

#: ``posviz hidden`` over 256 blocks takes a minute: its example is refreshed by ``make gallery`` with its recipe
#: (minilm-hidden, whose dependencies the first test checks), not run here.
EXAMPLES = [e for e in gallery.console_examples() if not e.command.startswith("posviz hidden")]


def test_the_docs_have_runnable_console_examples():
    assert {e.path for e in EXAMPLES} >= {"docs/heads.md", "docs/heatmap.md", "docs/report.md", "docs/toeplitzness.md",
                                          "docs/attention.md"}


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.label)
def test_the_docs_console_examples_print_what_posviz_prints(example):
    why = gallery.console_differs(example, gallery.run_console(example.command))
    assert why is None, f"{example.label}: {why}\n(refresh: scripts/gallery.py docs --write)"


def test_an_outdated_console_example_is_found_and_refreshed():
    example = next(e for e in EXAMPLES if "--layers all" in e.command)
    printed = "\n".join(example.shown.splitlines()[:3]) + "\nsomething new\n"
    assert gallery.console_differs(example, printed).startswith("line 5 shows")
    body = gallery.refreshed(example, printed)
    assert body == f"$ {example.command}\n" + "\n".join(example.shown.splitlines()[:3]) + "\nsomething new\n"


def test_no_shipped_file_names_a_folder_of_the_machine_that_made_it():
    """Shipped files are made from relative paths: a reader's machine has no /home/someone or scratch folder."""
    from pypdf import PdfReader

    machine = re.compile(r"(?<![\w.])/(?:home|root|tmp|work|Users|var/folders)/")
    for path in gallery.expand([f"{gallery.REPORTS}/**/*"], COMMITTED):
        if path.endswith(".pdf"):
            text = "\n".join(page.extract_text() for page in PdfReader(COMMITTED / path).pages)
        elif path.endswith((".md", ".csv", ".json", ".txt")):
            text = (COMMITTED / path).read_text(encoding="utf-8")
        else:
            continue
        found = machine.search(text)
        assert found is None, f"{path} names {text[found.start():found.start() + 60]!r}"


def test_remaking_the_length_generalisation_runs_replaces_every_shipped_record(tmp_path, monkeypatch):
    """The runs recipe's make calls the script for every (task, seed) that a shipped record holds: a remake that left
    some out would replace the folder of records with fewer of them (the CPU seeds were once left out)."""
    import json

    made: set[tuple[str, int]] = set()

    def fake_python(script, *args, cwd, **_):  # records what each call would run, and writes its record names
        argv = [str(a) for a in args]

        def values(flag: str) -> list[str]:  # the values after a flag, up to the next flag
            rest = argv[argv.index(flag) + 1 :] if flag in argv else []
            return rest[: next((i for i, v in enumerate(rest) if v.startswith("--")), len(rest))]

        tasks, seeds = values("--tasks"), [int(s) for s in values("--seeds")] or [0, 1, 2]  # the script's default seeds
        runs = Path(cwd) / "results" / "runs"
        runs.mkdir(parents=True, exist_ok=True)
        (Path(cwd) / "results" / "experiment.json").write_text("{}")
        for task in tasks:
            for seed in seeds:
                made.add((task, seed))
                (runs / f"{task}-x-s{seed}.json").write_text("{}")

    root = tmp_path / "root"
    (root / recipes.LG / "runs").mkdir(parents=True)
    monkeypatch.setattr(recipes, "ROOT", root)
    monkeypatch.setattr(recipes, "python", fake_python)
    recipes.make_lg_runs(tmp_path / "work")
    shipped = {(p.name.split("-")[0], int(p.stem.rsplit("-s", 1)[1])) for p in (COMMITTED / recipes.LG / "runs").glob("*.json")}
    assert shipped and json.loads((root / recipes.LG / "experiment.json").read_text()) == {}
    assert shipped <= made, f"a remake would lose {sorted(shipped - made)}"
