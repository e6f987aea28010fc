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
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its siblings gallery_*, however this is loaded

from gallery_files import BIN, MANIFEST, REPORTS, ROOT, committed_root, expand, sha256  # noqa: E402
from gallery_recipes import BY_NAME, MINILM, RECIPES, Recipe  # noqa: E402
from gallery_text import ConsoleExample, console_differs, refreshed  # noqa: E402

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
