"""Analyses: pure functions ``Profile -> Result``, registered by name."""
