"""Rules that turn analysis results into findings, and their on-device verification."""
