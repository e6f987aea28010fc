"""The text a pass runs over and how it runs, declared once for every text measure (:class:`TextInput`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from posviz.errors import OptionError
from posviz.train.corpus import DEMO_CORPUS


@dataclass(frozen=True)
class TextInput:
    """The text of one pass and how it is cut and run: shared by every text measure on that pass.

    ``posviz.attention``, ``posviz.hidden`` and :func:`~posviz.observe.text_pass.observe_text` take either a
    ``TextInput`` (``text=``) or its fields as keywords.

    Attributes
    ----------
    corpus
        Corpus spec(s) as ``posviz train`` reads them: text files, folders, the demo corpus (the default,
        :data:`~posviz.train.corpus.DEMO_CORPUS`) or a dataset id.
    seq_len
        Positions per block, special tokens included (ignored with ``token_blocks``).
    batch_size
        Blocks per forward pass.
    max_blocks
        At most this many blocks (``None``: the whole corpus).
    device, device_map
        ``cpu``/``cuda``, or ``device_map="auto"`` (accelerate) for models larger than one device.
    tokenizer
        A tokenizer to use instead of the model's (or the run's).
    token_blocks
        Ready token ids ``(blocks, seq_len)`` instead of a corpus (``seq_len`` is then their width).
    block_layout, special_positions
        What sits where in ``token_blocks``; measures of hidden states leave ``special_positions`` out.
    show_progress
        Draw a progress bar over blocks on stderr (when it is a terminal).
    """

    corpus: str | Sequence[str] = DEMO_CORPUS
    seq_len: int = 128
    batch_size: int = 8
    max_blocks: int | None = 256
    device: str | None = None
    device_map: str | None = None
    tokenizer: str | None = None
    token_blocks: np.ndarray | None = field(default=None, compare=False, repr=False)
    block_layout: str = "token blocks given"
    special_positions: Sequence[int] = ()
    show_progress: bool = False

    @classmethod
    def of(cls, text: TextInput | None, options: Mapping[str, Any]) -> TextInput:
        """``text``, or a ``TextInput`` of the keyword ``options`` (not both).

        Raises
        ------
        TypeError
            An option that is not a field (as a function's unexpected keyword would), or both given.
        """
        if text is None:
            return cls(**options)
        if options:
            raise TypeError(f"give text= or its fields as keywords, not both (got {sorted(options)})")
        return text

    def check(self) -> None:
        """Refuse sizes no pass can run, before a model is loaded.

        Raises
        ------
        OptionError
            A block shorter than 2 positions, or a batch size or block count below 1.
        """
        if self.token_blocks is None and self.seq_len < 2:
            raise OptionError(f"--seq-len {self.seq_len} is too short", "use at least 2 positions")
        if self.batch_size < 1 or (self.max_blocks is not None and self.max_blocks < 1):
            raise OptionError("--batch-size and --max-blocks must be at least 1")
