"""A model as a report input: its position table, scored once for every section."""

from __future__ import annotations

from posviz.report.context import ReportItem, ReportOptions


def load_model(spec: str, options: ReportOptions) -> ReportItem:
    """Load and score one model (the default input loader).

    Parameters
    ----------
    spec
        Anything :func:`~posviz.read.embeddings.load_position_embeddings` accepts.
    options
        Report settings (positions, table, normalisation, null baseline).

    Returns
    -------
    ReportItem
        With ``embeddings`` and ``score`` for models with learned absolute positions;
        for relative, ALiBi or rotary models only provenance and a ``note``.

    Raises
    ------
    PosvizError
        For inputs that cannot be read (the same errors as ``posviz toeplitzness``).
    """
    from posviz.read.embeddings import is_synthetic, load_position_embeddings
    from posviz.read.families import family_for_config
    from posviz.scoring.model import score_model

    if not is_synthetic(spec):
        from posviz.read.sources import resolve_source

        source = resolve_source(spec)
        family = family_for_config(source.config) if source.config else None
        if family is not None and not family.tables:
            note = f"no learned absolute position embeddings ({family.note})"
            return ReportItem(spec, source.label, source.describe(), kind="model-without-positions", family=family.name, note=note)
    pe = load_position_embeddings(spec, table=options.table, positions=options.positions)
    ms = score_model(pe, normalize=options.normalize, null_draws=options.null_draws, seed=options.seed)
    return ReportItem(spec, pe.model, pe.source, family=pe.family, embeddings=pe, score=ms.score)
