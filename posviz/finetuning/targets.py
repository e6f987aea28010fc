"""What ``posviz finetune SOURCE`` fine-tunes: checkpoints with their tokenizer, corpus and results folder.

* a ``posviz train`` run folder: its newest complete checkpoint; ``RUN@STEP`` one
  step; ``checkpoints="all"`` or a list of steps: those kept checkpoints. Results
  go inside the run folder (``RUN/finetune/step-STEP/``), the tokenizer is the
  run's ``tokenizer/`` folder, and the built-in tasks' corpus is the run's
  pre-training corpus (``run.json``);
* any model folder with a ``config.json``, or a hub id ``org/name[@revision]``
  (the Hugging Face cache first; offline with no cached copy: one error line).
  Results go under ``--out`` (``OUT/finetune/model/``; with several such models,
  ``OUT/NAME/finetune/model/``, ``NAME`` spelt from the source).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from posviz.errors import OptionError, SourceError
from posviz.util.paths import check_folder

#: Where results of models that are not ``posviz train`` runs go when no ``--out`` is given.
DEFAULT_OUT = "finetune-results"


@dataclass(frozen=True)
class Target:
    """One checkpoint to fine-tune.

    Attributes
    ----------
    source
        The source as given (``runs/a``, ``albert-base-v2``), the ``source`` of its records.
    model
        What ``from_pretrained`` reads: a checkpoint folder or a hub id.
    revision
        Hub revision (``None`` for folders).
    step
        The run's step (``None`` for other models).
    root
        Where its results live (``ROOT/finetune/...``).
    tokenizer
        Folder or hub id of its tokenizer.
    corpus
        The run's pre-training corpus (``None`` for other models).
    """

    source: str
    model: str
    revision: str | None
    step: int | None
    root: Path
    tokenizer: str
    corpus: tuple[str, ...] | None = None

    @property
    def checkpoint(self) -> str:
        """The checkpoint as the records name it (folder, or ``id@revision``)."""
        return self.model + (f"@{self.revision}" if self.revision else "")


def _run_corpus(run: Path) -> tuple[str, ...] | None:
    try:
        corpus = json.loads((run / "run.json").read_text(encoding="utf-8")).get("corpus")
    except (OSError, ValueError, AttributeError):
        return None
    return tuple(corpus) if isinstance(corpus, list) and corpus else None


def _run_targets(spec: str, run: str, step: str | None, checkpoints: str | list[int] | None) -> list[Target]:
    from posviz.read.manifests import checkpoint_step
    from posviz.read.manifests import checkpoints as kept
    from posviz.read.runs import run_checkpoint

    if step is not None and checkpoints is not None:
        raise OptionError(f"{spec}: give either RUN@STEP or --checkpoints, not both")
    if checkpoints is None:
        chosen = [run_checkpoint(run, step, spec=spec)]
    elif checkpoints == "all":
        steps = sorted(checkpoint_step(c) for c in kept(Path(run)))
        chosen = [run_checkpoint(run, str(s), spec=spec) for s in steps]
        if not chosen:
            raise SourceError(f"{spec}: this posviz train run has no checkpoint yet")
    else:
        chosen = [run_checkpoint(run, str(int(s)), spec=spec) for s in checkpoints]
    folder = Path(run)
    tokenizer = folder / "tokenizer"
    corpus = _run_corpus(folder)
    return [Target(c.run, str(c.folder), None, c.step, folder,
                   str(tokenizer if tokenizer.is_dir() else c.folder), corpus) for c in chosen]


def _slug(spec: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", spec).strip("-.") or "model"


def _model_target(spec: str, root: Path) -> Target:
    from posviz.read.sources import looks_like_hub_id, packaged_model_path

    path = Path(spec).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise SourceError(f"{spec}: the folder has no config.json and is not a posviz train run folder",
                              "give a run folder, a model folder saved with save_pretrained, or a hub id")
        return Target(spec, str(path), None, None, root, str(path))
    if path.exists():
        raise SourceError(f"{spec}: fine-tuning needs a model folder or a hub id, not a single weight file",
                          "give the folder with its config.json and tokenizer")
    if not looks_like_hub_id(spec) or spec.startswith((".", "/", "~")):
        raise SourceError(f"{spec}: no such file or folder", "give a run folder, a model folder or a hub id like albert-base-v2")
    repo_id, _, revision = spec.partition("@")
    packaged = packaged_model_path(repo_id) if not revision else None
    if packaged is not None:
        return Target(spec, str(packaged[0]), None, None, root, str(packaged[0]))
    return Target(spec, repo_id, revision or None, None, root, repo_id)


def resolve_targets(sources: list[str], checkpoints: str | list[int] | None = None, out: str | Path | None = None) -> list[Target]:
    """The checkpoints named by ``sources`` (see the module docstring), in order.

    Raises
    ------
    SourceError
        A missing path, a run with no complete checkpoint, a step it did not keep.
    OptionError
        ``checkpoints`` with a model that is not a run, or with ``RUN@STEP``; a
        results folder (``out``) that is, or lies under, a file.
    """
    from posviz.read.runs import run_reference

    if not sources:
        raise OptionError("give at least one SOURCE", "a posviz train run folder, RUN@STEP, a model folder or a hub id")
    others = [s for s in sources if run_reference(str(s)) is None]
    base = Path(out) if out is not None else Path(DEFAULT_OUT)
    if others:
        check_folder(base, "--out")
    targets: list[Target] = []
    for spec in map(str, sources):
        run = run_reference(spec)
        if run is not None:
            targets += _run_targets(spec, run[0], run[1], checkpoints)
            continue
        if checkpoints is not None:
            raise OptionError(f"--checkpoints applies to posviz train runs, and {spec} is not one")
        targets.append(_model_target(spec, base if len(others) == 1 else base / _slug(spec)))
    return targets
