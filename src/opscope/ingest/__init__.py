"""Readers: turn traces on disk into a Profile. See :func:`opscope.ingest.load`."""

from opscope.ingest.registry import load, sniff

__all__ = ["load", "sniff"]
