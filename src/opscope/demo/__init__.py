"""``opscope demo``: the seed article's case end to end on a built-in model."""
