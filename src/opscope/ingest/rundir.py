"""Reader for an opscope run directory (what ``opscope record`` writes).

Layout::

    run/
      run.json          the run's description            -> profile.meta["run"]
      model.json        {"modules": [{"path", "type", "params", "param_shapes": {name: [..]},
                                      "dtypes": [..], "contiguous": bool}, ...]}  -> modules
      metrics.jsonl     one JSON object per step: step, wall_ns, samples_per_s,
                        mem_allocated_peak, mem_reserved_peak, profiled, rank  -> metrics
      rank0/*.pt.trace.json.gz   Kineto traces of this rank (several with periodic sampling:
                                 step_00100.pt.trace.json.gz, ...), or *_ascend_pt folders
      rank1/...

Every trace of every rank is read (in parallel, see :func:`opscope.ingest.multirank.read_inputs`),
a rank's traces are joined in time order, and the ranks are joined with
:func:`opscope.model.concat`. The rank is the folder's number. A run whose steps all failed has
no traces: it still loads, with its metrics and modules and no events, and says so in
``meta["rundir"]["note"]``.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import polars as pl

from opscope.errors import InputError
from opscope.ingest import ascend
from opscope.ingest.multirank import rank_header, read_inputs
from opscope.ingest.registry import Progress
from opscope.model import Profile, concat
from opscope.model import schema as S

_RANK_DIR = re.compile(r"^rank[-_]?(\d+)$")
_TRACE_SUFFIXES = (".json", ".json.gz")


def list_traces(path: Path) -> list[tuple[int, Path, str]]:
    """``(rank, trace, format)`` of every trace in a run directory, by rank then name."""
    out: list[tuple[int, Path, str]] = []
    for d in sorted(Path(path).iterdir()):
        m = _RANK_DIR.match(d.name)
        if not (m and d.is_dir()):
            continue
        rank = int(m.group(1))
        if ascend.is_ascend_dir(d):
            out.append((rank, d, "ascend"))
            continue
        for f in sorted(d.rglob("*")):
            if any(part.startswith(".") for part in f.relative_to(d).parts):
                continue  # caches (".trace.json.gz.opscope/") and other hidden files
            if f.is_dir() and ascend.is_ascend_dir(f):
                out.append((rank, f, "ascend"))
            elif (
                f.is_file()
                and f.name.endswith(_TRACE_SUFFIXES)
                and "ASCEND_PROFILER_OUTPUT" not in f.parts
                and not any(p.endswith("_ascend_pt") for p in f.parts)
            ):
                out.append((rank, f, "kineto"))
    return sorted(out, key=lambda t: (t[0], str(t[1])))


def read_run_dir(
    path: Path,
    *,
    salvage: bool = False,
    cache: bool = True,
    progress: Progress | None = None,
    workers: int | None = None,
) -> Profile:
    """Read a whole run directory: every rank's traces, ``model.json`` and ``metrics.jsonl``.

    Raises :class:`~opscope.errors.InputError` when ``run.json`` is missing or not JSON, or a
    trace cannot be read. Bad lines in ``metrics.jsonl`` (a run killed mid-write) are skipped
    and counted in ``meta["oddities"]``.
    """
    path = Path(path)
    run_file = path / "run.json"
    if not run_file.is_file():
        raise InputError("not an opscope run directory (no run.json)", path)
    try:
        run = json.loads(run_file.read_text(encoding="utf-8"))
    except ValueError as e:
        raise InputError(f"run.json is not valid JSON ({e})", run_file) from None
    odd: Counter[str] = Counter()
    modules = read_model_json(path / "model.json")
    metrics = read_metrics(path / "metrics.jsonl", odd)

    traces = list_traces(path)
    profiles = read_inputs(traces, salvage=salvage, cache=cache, progress=progress, workers=workers)
    per_rank: dict[int, list[Profile]] = {}
    for (rank, _, _), p in zip(traces, profiles, strict=True):
        per_rank.setdefault(rank, []).append(p)
    joined: list[Profile] = []
    for rank in sorted(per_rank):
        parts = sorted(per_rank[rank], key=_start)
        joined.append(parts[0] if len(parts) == 1 else concat(parts))
    for p in joined:
        for k, v in p.meta.get("oddities", {}).items():
            odd[k] += int(v)
    formats = {p.meta.get("format") for p in joined}
    ranks_m = metrics.get_column("rank").drop_nulls().unique().to_list()
    ranks = sorted({*per_rank, *(int(r) for r in ranks_m)})
    meta: dict[str, Any] = {
        "format": (formats.pop() if len(formats) == 1 else "mixed") if joined else "rundir",
        "sources": [str(t) for _, t, _ in traces] or [str(path)],
        "ranks": ranks or [0],
        "oddities": dict(odd),
        "run": run,
        "trace_meta": {
            str(r): rank_header(p) for r, p in zip(sorted(per_rank), joined, strict=True)
        },
        "rundir": {
            "path": str(path),
            "traces": len(traces),
            "traces_per_rank": {str(r): len(v) for r, v in sorted(per_rank.items())},
            "note": None if traces else "no traces recorded (no profiled step completed)",
        },
    }
    salvaged = [p.meta["salvaged"] for p in profiles if "salvaged" in p.meta]
    if salvaged:
        meta["salvaged"] = {
            "events": sum(int(s.get("events", 0)) for s in salvaged),
            "reason": "; ".join(str(s.get("reason")) for s in salvaged),
        }
    base = concat(joined, meta=meta) if joined else Profile.from_tables(meta=meta)
    return base.with_tables(metrics=metrics, modules=modules).with_meta(**meta)


def _start(p: Profile) -> int:
    ts = p.events.get_column("ts_ns").min()
    return int(ts) if isinstance(ts, int) else 0


def read_model_json(path: Path) -> pl.DataFrame:
    """The MODULES table from ``model.json`` (empty when the file is absent)."""
    if not path.is_file():
        return S.empty("modules")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise InputError(f"not valid JSON ({e})", path) from None
    mods = data.get("modules") if isinstance(data, dict) else None
    if not isinstance(mods, list):
        raise InputError('expected {"modules": [...]}', path)
    rows = []
    for m in mods:
        if not isinstance(m, dict):
            continue
        rows.append(
            {
                "path": m.get("path"),
                "type": m.get("type"),
                "params": m.get("params"),
                "param_shapes": _compact(m.get("param_shapes")),
                "dtypes": _compact(m.get("dtypes")),
                "contiguous": m.get("contiguous"),
            }
        )
    return pl.DataFrame(rows, schema=dict(S.MODULES))


def read_metrics(path: Path, odd: Counter[str] | None = None) -> pl.DataFrame:
    """The METRICS table from ``metrics.jsonl``; lines that are not JSON objects are skipped."""
    if not path.is_file():
        return S.empty("metrics")
    rows = []
    bad = 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            bad += 1
            continue
        if not isinstance(obj, dict):
            bad += 1
            continue
        rows.append({k: obj.get(k) for k in S.METRICS})
    if bad and odd is not None:
        odd["metrics.jsonl: unreadable lines (skipped)"] += bad
    if not rows:
        return S.empty("metrics")
    out = S.conform(
        "metrics",
        pl.DataFrame([pl.Series(k, [r[k] for r in rows], strict=False) for k in S.METRICS]),
    )
    return out.with_columns(pl.col("rank").fill_null(0))


def _compact(v: Any) -> str | None:
    return None if v is None else json.dumps(v, separators=(",", ":"))
