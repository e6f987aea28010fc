"""Content probes of RoPE probe profiles: which input ``mu`` the queries and keys are computed from.

``--probe`` takes

* ``mean`` (default): the mean over the vocabulary of the token embeddings after the
  layer's input norm, ``mu = mean_v norm_L(e_v)``; the embedding matrix is read in row
  chunks (``vocab x hidden`` values: 2 GiB for a Llama-3-70B in bf16);
* ``token:ID`` or ``token:TEXT``: one token's embedding after the norm (``TEXT`` needs the
  model's tokenizer files; a text of several tokens gives their mean);
* ``corpus:FILE``: the mean over the tokens of a UTF-8 text file (tokenised with the model's tokenizer);
* ``none`` / ``content-free``: no probe; the weight-free kernel ``sum_b cos(k theta_b)``.

For deeper layers the probe is the token embedding alone through that layer's norm
(what earlier layers add is ignored; exact for layer 0). See docs/definitions.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from posviz.errors import OptionError, SourceError
from posviz.extract.base import read_finite

#: Rows of the embedding matrix read at a time for the mean probe.
CHUNK_ROWS = 4096
CONTENT_FREE = ("none", "content-free")


@dataclass(frozen=True)
class Probe:
    """A parsed ``--probe``: ``kind`` is ``mean``, ``token``, ``corpus`` or ``none``."""

    kind: str
    value: str = ""

    @property
    def label(self) -> str:
        """How outputs name the probe."""
        return self.kind if not self.value else f"{self.kind}:{self.value}"


def parse_probe(text: str | None) -> Probe:
    """Parse ``--probe`` (``mean``, ``token:ID|TEXT``, ``corpus:FILE``, ``none``/``content-free``)."""
    text = (text or "mean").strip()
    if text in ("mean", *CONTENT_FREE):
        return Probe("none" if text in CONTENT_FREE else "mean")
    kind, sep, value = text.partition(":")
    if sep and kind in ("token", "corpus") and value:
        if kind == "corpus" and not Path(value).is_file():
            raise OptionError(f"--probe corpus:{value}: no such file", "give a UTF-8 text file")
        return Probe(kind, value)
    raise OptionError(f"--probe {text!r} is not mean, token:ID|TEXT, corpus:FILE, none or content-free",
                      "e.g. --probe token:13 or --probe corpus:text.txt")


def _tokenizer(source):
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(source.root))
    except Exception as e:
        raise SourceError(f"{source.label}: cannot load its tokenizer for the probe: {str(e).splitlines()[0] if str(e) else type(e).__name__}",
                          "give the token as token:ID, or use the default --probe mean") from None


def _token_counts(probe: Probe, source, vocab: int) -> np.ndarray:
    """How often each vocabulary row enters the probe's mean."""
    if probe.kind == "token" and probe.value.isdigit():
        ids = [int(probe.value)]
    else:
        text = probe.value if probe.kind == "token" else Path(probe.value).read_text(encoding="utf-8")
        ids = list(_tokenizer(source)(text, add_special_tokens=False)["input_ids"])
        if not ids:
            raise OptionError(f"--probe {probe.label}: no tokens", "give a non-empty text")
    bad = [i for i in ids if not 0 <= i < vocab]
    if bad:
        raise OptionError(f"--probe {probe.label}: token id {bad[0]} is outside the vocabulary (0-{vocab - 1})")
    return np.bincount(np.asarray(ids), minlength=vocab).astype(np.float64)


def probe_input(ckpt, embed: str, probe: Probe, norm: Callable[[np.ndarray], np.ndarray] | None,
                embed_scale: float = 1.0, through: str = "the layer's input norm") -> tuple[np.ndarray, str]:
    """The probe ``mu`` (``(D,)``, after the layer's input norm) and a line saying what it is and what it read.

    ``norm`` is the layer's input norm (``None`` for none), or whatever maps embedding rows
    to the layer's input (``through`` says what, for the line); ``embed_scale`` the factor the
    model applies to embeddings before the first layer (Gemma: ``sqrt(hidden)``).
    """
    name = ckpt.require(embed + ".weight", "token embedding")
    vocab = ckpt.shape(name)[0]
    counts = np.ones(vocab) if probe.kind == "mean" else _token_counts(probe, ckpt.source, vocab)
    rows = np.flatnonzero(counts)
    total: np.ndarray | float = 0.0  # the width of norm's output, which may differ from the embedding's
    if len(rows) <= 16:  # a few tokens: read only their rows
        for r in rows:
            x = read_finite(ckpt, name, slice(int(r), int(r) + 1)) * embed_scale
            total += counts[r] * (norm(x) if norm else x)[0]
    else:
        for start in range(0, vocab, CHUNK_ROWS):
            stop = min(start + CHUNK_ROWS, vocab)
            if not counts[start:stop].any():
                continue
            x = read_finite(ckpt, name, slice(start, stop)) * embed_scale
            total += counts[start:stop] @ (norm(x) if norm else x)
    what = {"mean": f"mean of all {vocab} token embeddings", "token": f"token {probe.value}",
            "corpus": f"mean over the {int(counts.sum())} tokens of {Path(probe.value).name}"}[probe.kind]
    return total / counts.sum(), f"{what} ({name}), through {through}"
