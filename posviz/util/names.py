"""Short display names of models: what a title, a legend or a menu shows, the full source staying in provenance."""

from __future__ import annotations

import re

_RUN = re.compile(r"^run (?P<path>.+), checkpoint-\d+ \(step (?P<step>\d+)\)$")


def display_name(label: str) -> str:
    """The name to show for a model labelled ``label``: a hub id as it is, a local folder by its own name.

    ``run PATH, checkpoint-N (step N)`` (a training run) becomes ``FOLDER@N``; a path (``/x/y/model``, ``./model``,
    ``a/b/c``) its last part; a hub id (``org/name``), a packaged model or a synthetic spec stays as it is.

    Examples
    --------
    >>> display_name("run /home/me/runs/copy-none, checkpoint-3000 (step 3000)")
    'copy-none@3000'
    >>> display_name("/tmp/models/bert-tiny/")
    'bert-tiny'
    >>> display_name("albert/albert-base-v2")
    'albert/albert-base-v2'
    """
    text = label.strip()
    run = _RUN.match(text)
    if run:
        return f"{_last(run['path'])}@{run['step']}"
    if text.startswith(("/", "./", "../", "~", "\\")) or text.count("/") >= 2 or "\\" in text:
        return _last(text) or text
    return text


def _last(path: str) -> str:
    parts = [p for p in re.split(r"[\\/]", path) if p]
    return parts[-1] if parts else path
