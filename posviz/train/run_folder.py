"""The run folder of ``posviz train``: checks before a run, its first files, and what a failed write says.

Layout (see ARCHITECTURE.md)::

    RUN/run.json                  options of the run (``--resume`` reuses them)
    RUN/tokenizer/                the tokenizer (trained or copied)
    RUN/checkpoint-N/             model (safetensors + config), optimizer, RNG states, manifest
    RUN/trajectory.csv, .json     metrics and Toeplitzness per evaluation

Nothing is written before every check passed (:func:`check_run_folder`,
:func:`check_same_data`); :func:`start_run_folder` then writes ``run.json`` first,
so that a run killed from there on can always be resumed.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import shutil
from pathlib import Path
from typing import Any

from posviz.errors import OptionError, PosvizError
from posviz.read.runs import RUN_FILE
from posviz.train.options import FIXED_OPTIONS, TrainOptions

TOKENIZER_DIR = "tokenizer"

#: File-system errors (disk full, quota, read-only, I/O) end a run with one line, not a traceback.
WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EACCES}


def default_out(scheme: str, size: str, seed: int) -> Path:
    """``runs/SCHEME-SIZE-sSEED`` (``+`` replaced so the name is shell-friendly)."""
    return Path("runs") / f"{scheme.replace('+', '-')}-{size}-s{seed}"


def recorded_options(out: Path) -> dict[str, Any]:
    """Options stored in ``out/run.json`` (empty if there is none)."""
    try:
        data = json.loads((Path(out) / RUN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    names = {f.name for f in dataclasses.fields(TrainOptions)}
    return {k: v for k, v in data.items() if k in names}


def check_run_folder(options: TrainOptions, resume: bool) -> Path | None:
    """Check the run folder and, for ``--resume``, the recorded options; choose the checkpoint.

    Returns
    -------
    Path or None
        The newest complete checkpoint to resume from (:func:`posviz.train.resume.resume_checkpoint`);
        ``None``: train from scratch.

    Raises
    ------
    OptionError
        ``--out`` is (or lies under) a file; a new run into a non-empty folder; ``--resume`` without a run, or changing
        one of :data:`~posviz.train.options.FIXED_OPTIONS`.
    """
    from posviz.read.manifests import checkpoints
    from posviz.train.resume import resume_checkpoint
    from posviz.util.paths import check_folder

    out = options.out
    run_file = out / RUN_FILE
    check_folder(out, "--out")
    if not resume:
        if out.exists() and any(out.iterdir()):
            raise OptionError(f"{out} already exists and is not empty", "pass --resume to continue that run, or choose another --out")
        return None
    if not run_file.is_file():
        raise OptionError(f"no run to resume in {out} (no {RUN_FILE})", "start it without --resume first")
    try:
        recorded = json.loads(run_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise PosvizError(f"cannot read {run_file}: {e}") from None
    defaults = {f.name: f.default for f in dataclasses.fields(TrainOptions)}  # options added later: older runs used the default
    for key in FIXED_OPTIONS:
        if key not in recorded and defaults.get(key) not in (None, dataclasses.MISSING):
            recorded[key] = defaults[key]
        if key in recorded and recorded[key] != getattr(options, key) and getattr(options, key) is not None:
            raise OptionError(
                f"--resume cannot change {key.replace('_', '-')}: the run used {recorded[key]!r}, not {getattr(options, key)!r}",
                "drop the option, or start a new run with another --out",
            )
    had_checkpoints = bool(checkpoints(out))
    ckpt = resume_checkpoint(out)
    if ckpt is None and had_checkpoints:
        import warnings

        warnings.warn("no complete checkpoint is left; training starts again from step 0", stacklevel=2)
    return ckpt


def check_same_data(out: Path, info: dict[str, Any]) -> None:
    """Refuse to resume a run whose corpus (its SHA-256) or tokenizer changed (its blocks' fingerprint differs)."""
    from posviz.train.corpus import check_same_corpus

    recorded = json.loads((out / RUN_FILE).read_text(encoding="utf-8"))
    check_same_corpus(recorded, info, f"the run {out}")
    if recorded.get("data_fingerprint") not in (None, info["data_fingerprint"]):
        raise PosvizError("the corpus or tokenizer changed since the run started", "resume with the same --corpus, or start a new run")


def warn_changed_processes(out: Path, world_size: int) -> None:
    """Warn when a run resumes with another number of processes than it last ran with (its global batch changes)."""
    import warnings

    recorded = json.loads((out / RUN_FILE).read_text(encoding="utf-8"))
    before = int(recorded.get("world_size", 1))
    if before != world_size:
        batch = int(recorded.get("batch_size", 0))
        warnings.warn(
            f"the run last ran in {before} process(es) (global batch {before * batch}) and resumes in {world_size} "
            f"(global batch {world_size * batch}): the steps from here see other batches than an uninterrupted run",
            stacklevel=2,
        )


def start_run_folder(out: Path, run_info: dict[str, Any], tokenizer: Any) -> None:
    """Write ``run.json``, then the tokenizer (a missing tokenizer is rebuilt identically on resume)."""
    from posviz.util.atomic import write_text_atomic

    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / RUN_FILE, json.dumps(run_info, indent=2) + "\n")
    tok_dir = out / TOKENIZER_DIR
    if not tok_dir.is_dir():
        tmp = out / ".tokenizer.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tokenizer.save_pretrained(str(tmp))
        os.replace(tmp, tok_dir)


def write_failure(out: Path, err: OSError, step: int) -> str:
    """One sentence for a run stopped by a failed write: what happened and where to resume from."""
    from posviz.read.manifests import checkpoint_problem, checkpoints

    intact = next((c for c in checkpoints(out) if checkpoint_problem(c) is None), None)
    where = f"the last complete checkpoint is {intact.name}" if intact else "no checkpoint was completed"
    return (f"cannot write to {out}: {err.strerror} (training stopped near step {step}; {where}; "
            f"free space, then `posviz train --resume --out {out}` continues from it)")
