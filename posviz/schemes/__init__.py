"""Every positional scheme in one home: its math once, in numpy, here (no torch import), and its torch module
for the posviz models in :mod:`posviz.schemes.modules` (imported only by :mod:`posviz.models`).

Both sides of posviz use these modules: the analysis (:mod:`posviz.extract`)
evaluates them in float64, and the torch builders (:mod:`posviz.schemes.modules`)
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
(:mod:`posviz.schemes.modules`); the analysis evaluates them through that code.
See ARCHITECTURE.md for where this package sits.
"""
