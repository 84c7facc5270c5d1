"""Recording: the only layer that imports torch (lazily)."""
