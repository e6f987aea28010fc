"""The math of each positional scheme, once, in numpy (no torch import).

Both sides of posviz use these modules: the analysis (:mod:`posviz.extract`)
evaluates them in float64, and the torch builders (:mod:`posviz.models.schemes`)
turn their tables into tensors. One small module per scheme:

* :mod:`~posviz.schemes.offsets`: the offset axis ``k = j - i`` and the index
  table that expands ``f(k)`` into ``F[i, j]``;
* :mod:`~posviz.schemes.absolute`: how a learned table enters attention
  (the LayerNorm modes ``none | ln | ln+type0``);
* :mod:`~posviz.schemes.t5`: T5's relative-position buckets;
* :mod:`~posviz.schemes.alibi`: ALiBi slopes and the linear distance bias;
* :mod:`~posviz.schemes.rope`: rotary frequencies (every ``rope_type``) and the
  content-free kernel.

TISA and TUPE are learned modules that exist only in torch
(:mod:`posviz.models.schemes`); the analysis evaluates them through that code.
See ARCHITECTURE.md for where this package sits.
"""
