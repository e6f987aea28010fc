"""Small helpers with no posviz knowledge: atomic writes, cache paths, row writers, progress, number formatting."""
