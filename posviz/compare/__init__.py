"""Scores beside results: bundled reference values, the ALBERT v1 → v2 comparison, trajectories (see ARCHITECTURE.md)."""
