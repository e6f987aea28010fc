"""Checkpoint -> per-head positional-score stacks, one module per positional scheme.

:func:`posviz.extract.registry.open_heads` is the one entry point: it resolves
the model, asks each scheme of :data:`posviz.extract.registry.SCHEMES` in turn
whether it claims the model's family, and returns that scheme's
:class:`~posviz.extract.base.HeadsSource` (``layer(L)`` gives a
:class:`~posviz.positional_scores.PositionalScores`). See ARCHITECTURE.md.
"""
