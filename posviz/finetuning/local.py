"""Local task files: ``csv:PATH`` and ``jsonl:PATH`` with columns ``text``, ``label`` and optional ``text_pair``.

``csv:TRAIN,DEV`` (or ``jsonl:TRAIN,DEV``) gives the dev file; otherwise 10 % of
the file (at least one example) is held out, always the same examples (seed 0,
whatever the fine-tuning seed), so that every seed is scored on the same dev set.
Labels: integers or strings are classes; real numbers (a CSV value with a
decimal point or an exponent, a JSON float) mean regression.
"""

from __future__ import annotations

import csv
import hashlib
import json
import random
import re
from pathlib import Path
from typing import Any

from posviz.finetuning.taskdata import DEV_FRACTION, Example, TaskData, TaskError, labels_of

_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?([0-9]+\.[0-9]*|\.[0-9]+|[0-9]+(\.[0-9]*)?[eE][+-]?[0-9]+)")


def _rows(path: Path, kind: str, spec: str) -> list[dict[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise TaskError(f"task {spec}: file {path} does not exist") from None
    except UnicodeDecodeError:
        raise TaskError(f"task {spec}: {path} is not UTF-8 text") from None
    except OSError as e:
        raise TaskError(f"task {spec}: cannot read {path}: {e.strerror or e}") from None
    if kind == "csv":
        reader = csv.DictReader(text.splitlines())
        rows = list(reader)
        columns = reader.fieldnames or []
    else:
        rows = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    row = json.loads(line)
                except ValueError as e:
                    raise TaskError(f"task {spec}: {path} line {n} is not JSON ({e})") from None
                if not isinstance(row, dict):
                    raise TaskError(f"task {spec}: {path} line {n} is not a JSON object")
                rows.append(row)
        columns = list(dict.fromkeys(k for r in rows for k in r))
    missing = [c for c in ("text", "label") if c not in columns]
    if missing or any(r.get(c) is None for r in rows for c in ("text", "label")):
        raise TaskError(f"task {spec}: {path} has no {' or '.join(missing) or 'value in a text or label'} column"
                        + (f" (columns: {', '.join(map(str, columns)) or 'none'})" if missing else " on some rows"),
                        "give columns text and label, and optionally text_pair")
    nested = next((r["label"] for r in rows if isinstance(r["label"], (list, dict))), None)
    if nested is not None:  # JSON lists and objects: no class to name, no number to regress on
        raise TaskError(f"task {spec}: {path} has a label that is not a single value ({json.dumps(nested)[:40]})",
                        "give each example one label: a class (text or whole number) or a real number")
    return rows


def _label(value: Any, kind: str) -> Any:
    if kind == "jsonl" or not isinstance(value, str):
        return value
    v = value.strip()
    if _INT.fullmatch(v):
        return int(v)
    if _FLOAT.fullmatch(v):
        return float(v)
    return v


def _examples(rows: list[dict[str, Any]], kind: str) -> list[Example]:
    out = []
    for r in rows:
        pair = r.get("text_pair")
        out.append(Example(str(r["text"]), None if pair in (None, "") else str(pair), _label(r["label"], kind)))
    return out


def _regression(examples: list[Example], spec: str, split: str) -> list[Example]:
    """Real-valued labels: every label as a float (a file may write 3 beside 2.5)."""
    bad = next((e.label for e in examples if isinstance(e.label, bool) or not isinstance(e.label, (int, float))), None)
    if bad is not None:
        raise TaskError(f"task {spec}: the training labels are real numbers (regression), and a {split} label is {bad!r}",
                        "give numbers in every split, or classes (no decimal point) in every split")
    return [Example(e.text, e.text_pair, float(e.label)) for e in examples]


def load_local(spec: str, kind: str, rest: str) -> TaskData:
    """Read ``csv:PATH[,DEV]`` or ``jsonl:PATH[,DEV]`` (see the module docstring)."""
    if Path(rest).exists() or "," not in rest:
        files = [Path(rest)]
    else:
        files = [Path(p) for p in rest.rsplit(",", 1)]
    parts = [_examples(_rows(f, kind, spec), kind) for f in files]
    train = parts[0]
    if len(parts) == 2:
        dev = parts[1]
    else:
        order = list(range(len(train)))
        random.Random(0).shuffle(order)
        held = set(order[: max(1, round(DEV_FRACTION * len(train)))] if len(train) > 1 else [])
        dev = [e for i, e in enumerate(train) if i in held]
        train = [e for i, e in enumerate(train) if i not in held]
    values = [e.label for e in train]
    regression = any(isinstance(v, float) for v in values) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    if regression:
        train, dev = _regression(train, spec, "training"), _regression(dev, spec, "dev")
    labels = labels_of([e.label for e in train])
    digest = hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()[:16]
    metrics = ("pearson", "spearman") if labels is None else ("accuracy",)
    return TaskData(spec, train, {"": dev}, labels, metrics,
                    {"files": [str(f) for f in files], "sha256": digest, "held_out": len(files) == 1})
