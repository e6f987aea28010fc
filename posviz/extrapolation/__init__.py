"""Beyond the trained length (``posviz extrapolate``): held-out loss and attention statistics at several lengths.

The public entry point is the plain function ``posviz.extrapolate`` (``posviz.extrapolate("gpt2", lengths="256,1024,2048")``), defined in
:mod:`posviz.extrapolation.extrapolate` and re-exported by ``posviz``; this package holds its parts.

Modules, bottom to top: RoPE-scaling variants (:mod:`~posviz.extrapolation.scaling`), what a
config says about objective, table and training length (:mod:`~posviz.extrapolation.objective`),
the text budget and its windows at each length (:mod:`~posviz.extrapolation.blocks`), entropy and
largest-weight sums (:mod:`~posviz.extrapolation.rows`), one pass at one length
(:mod:`~posviz.extrapolation.evaluate`), the records (:mod:`~posviz.extrapolation.result`), one model
through its variants and lengths (:mod:`~posviz.extrapolation.models`), task runs on their task
(:mod:`~posviz.extrapolation.tasks`) and the entry point (:mod:`~posviz.extrapolation.extrapolate`). Definitions: docs/definitions.md.
"""
