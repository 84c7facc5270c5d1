"""Readers: turn traces on disk into a Profile. See :func:`opscope.ingest.load`."""
