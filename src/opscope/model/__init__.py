"""The Profile model: columnar tables with one declared schema."""

from opscope.model.profile import Profile, concat
from opscope.model.schema import SCHEMA_VERSION, TABLES

__all__ = ["SCHEMA_VERSION", "TABLES", "Profile", "concat"]
