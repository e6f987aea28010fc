"""Many models or many layers at once: the score cache, scoring plans and the layer loop (see ARCHITECTURE.md)."""
