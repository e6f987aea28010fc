"""Where weights are and what they mean: sources, tensor reading, families, attention layouts, E_P (see ARCHITECTURE.md)."""
