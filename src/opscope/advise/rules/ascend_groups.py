"""The op groups the Ascend rules claim, in :mod:`opscope.advise.overlap`'s terms.

An op group is the first op id of a group of calls of one op at one shape (the performance
model's outermost costed calls grouped by name, input dims and input types): what the GEMM,
alignment and ``elementwise-bandwidth`` rules list in ``evidence["op_groups"]``. An Ascend
finding on the same calls (a fused API for an add that ``elementwise-bandwidth`` finds slow)
lists the same groups, so that the two savings are counted once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import polars as pl

from opscope.advise import _common as c
from opscope.model import Profile


def _first_of_group(profile: Profile, results: Mapping[str, Any]) -> dict[int, int]:
    """Per model call id: the first call id of its (name, input dims, input types) group."""

    def build() -> dict[int, int]:
        calls = c.perf_model(profile, results).calls
        if calls.height == 0:
            return {}
        g = calls.filter(pl.col("time_ns").fill_null(0) > 0).select(
            "id", pl.col("id").min().over("name", "input_dims", "input_types").alias("first")
        )
        return dict(zip(g.get_column("id").to_list(), g.get_column("first").to_list(), strict=True))

    out: dict[int, int] = c._memo(f"ascend_groups:{c.device_option(results)}", profile, build)
    return out


def op_groups(profile: Profile, results: Mapping[str, Any], op_ids: Iterable[int]) -> list[int]:
    """The op groups of the model calls that hold ``op_ids`` (an op itself, or the outermost
    costed op above it); an op under no model call is a group of its own."""
    ids = sorted({int(i) for i in op_ids})
    if not ids:
        return []
    first = _first_of_group(profile, results)
    out: set[int] = set()
    rest = [i for i in ids if i not in first]
    out.update(first[i] for i in ids if i in first)
    if rest:
        anc = c.ancestors(profile, pl.Series(rest, dtype=pl.Int64)).sort("hops")
        hit: dict[int, int] = {}
        for i, a in anc.select("id", "anc_id").rows():
            if a in first:
                hit.setdefault(int(i), first[a])
        out.update(hit.get(i, i) for i in rest)
    return sorted(out)
