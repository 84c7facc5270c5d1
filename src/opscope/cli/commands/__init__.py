"""One module per sub-command; each defines ``register(app)``."""
