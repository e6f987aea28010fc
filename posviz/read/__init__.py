"""What weights mean and where they are: sources, checkpoints and the tensors read from them, families, attention
layouts, E_P, run folders (see ARCHITECTURE.md). Bytes from the Hub come through :mod:`posviz.hub`."""
