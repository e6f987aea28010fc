"""Results made from a corpus carry its hash, and are not extended from other text (fine-tuning results here;
runs in test_train.py, experiments in test_albert_v1_v2_script.py)."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest
from typer.testing import CliRunner

from posviz.cli.app import app
from posviz.finetuning.results import results_path

pytestmark = pytest.mark.usefixtures("one_thread")


def _sha256(docs: list[str]) -> str:
    return hashlib.sha256(json.dumps(docs, ensure_ascii=False).encode("utf-8")).hexdigest()


def test_builtin_task_results_record_their_corpus_and_refuse_other_text(absolute_run, train_corpus, tmp_path):
    run = shutil.copytree(absolute_run, tmp_path / "run")
    text = tmp_path / "texts.txt"
    text.write_text(train_corpus.read_text(encoding="utf-8"), encoding="utf-8")
    docs = [d.strip() for d in text.read_text(encoding="utf-8").split("\n\n") if d.strip()]
    args = ["finetune", str(run), "--task", "builtin/shuffled", "--corpus", str(text), "--steps", "2", "--batch-size", "8",
            "--train-size", "16", "--dev-size", "8"]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    path = results_path(run, "builtin/shuffled", 12)
    task = json.loads(path.read_text())["settings"]["task"]
    assert task["corpus"] == [str(text)] and task["corpus_sha256"] == _sha256(docs) and task["corpus_documents"] == len(docs)
    before = path.read_bytes()

    text.write_text(text.read_text(encoding="utf-8") + "\n\nThe first sentence added later. And a second one here.\n", encoding="utf-8")
    other = CliRunner().invoke(app, args)
    assert other.exit_code == 2, other.output
    lines = other.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path} was made from corpus sha256 {_sha256(docs)[:12]}"), other.stderr
    assert path.read_bytes() == before  # nothing rewritten
