"""Where an Ascend rank's files are: the output folder, its rank, its device, the profiler's
info.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from opscope.errors import InputError
from opscope.ingest.ascend.convert import _load_json

OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"


def find_output_dir(path: Path) -> Path:
    """The ``ASCEND_PROFILER_OUTPUT`` folder for ``path`` (a ``*_ascend_pt`` dir or the folder)."""
    if (path / OUTPUT_DIR).is_dir():
        return path / OUTPUT_DIR
    return path


#: Files that make a folder one Ascend rank: the text export, the database export
#: (:mod:`opscope.ingest.ascend_db`), or the partial output of a rank that kept only its step
#: breakdown and communication (:func:`opscope.ingest.ascend_comm.read_partial`).
_RANK_FILES = ("trace_view.json", "kernel_details.csv")


_PARTIAL_FILES = ("step_trace_time.csv", "communication.json", "communication_matrix.json")


def is_ascend_dir(path: Path) -> bool:
    """True when ``path`` looks like Ascend output: the output folder or a kernel table, a
    profiler database, or a step breakdown / communication files."""
    if not path.is_dir():
        return False
    out = find_output_dir(path)
    if any((out / n).is_file() for n in _RANK_FILES + _PARTIAL_FILES):
        return True
    return any(f.stat().st_size > 0 for f in out.glob("ascend_pytorch_profiler*.db"))


def rank_of(path: Path) -> int | None:
    """The rank recorded in ``profiler_info_N.json`` beside the output folder, if any."""
    root = path.parent if path.name == OUTPUT_DIR else path
    for info in sorted(root.glob("profiler_info*.json")):
        try:
            data = json.loads(info.read_text(encoding="utf-8-sig"))
        except (OSError, ValueError):
            data = {}
        rid = data.get("rank_id") if isinstance(data, dict) else None
        if isinstance(rid, int) and rid >= 0:
            return rid
        m = re.search(r"profiler_info_(\d+)\.json$", info.name)
        if m:
            return int(m.group(1))
    return None


#: trace_view.json (or profiler database) size from which a parsed Ascend output is cached.
CACHE_MIN_BYTES = 16 * 1024 * 1024


def cache_anchor(path: Path) -> Path | None:
    """The file whose size and mtime key the cache of an Ascend output (its trace_view.json,
    else its kernel_details.csv, else its profiler database); None when none exists."""
    out = find_output_dir(Path(path))
    for name in ("trace_view.json", "kernel_details.csv"):
        if (out / name).is_file():
            return out / name
    from opscope.ingest import ascend_db

    return ascend_db.find_db(Path(path))


def _device_of(out: Path, rank: int) -> int:
    for name in ("memory_record.csv", "operator_memory.csv"):
        f = out / name
        if f.is_file():
            try:
                head = f.read_text(encoding="utf-8-sig", errors="replace")[:4096]
            except OSError:
                continue
            m = re.search(r"NPU:(\d+)", head)
            if m:
                return int(m.group(1))
    return rank


def _profiler_info(out: Path) -> dict[str, Any]:
    root = out.parent if out.name == OUTPUT_DIR else out
    info: dict[str, Any] = {}
    for f in sorted(root.glob("profiler_info*.json")):
        data = _load_json(f)
        info["profiler_info"] = {k: v for k, v in data.items() if k != "ENV_VARIABLES"}
        break
    md = root / "profiler_metadata.json"
    if md.is_file():
        try:
            data = _load_json(md)
        except InputError:
            data = {}
        # Environment variables can hold secrets: never kept.
        info["profiler_metadata"] = {k: v for k, v in data.items() if k != "ENV_VARIABLES"}
    # The job's world size, where the metadata says it, in the header key Kineto traces use
    # (doctor's missing-rank check and the summary read it there).
    from opscope.ingest import ascend_comm

    try:
        world = ascend_comm.world_size(root)
    except InputError:
        world = None  # an unreadable metadata file is already ignored above
    if world is not None:
        info["distributedInfo"] = {"world_size": world, "rank": rank_of(root)}
    return info


def _level(info: dict[str, Any]) -> str | None:
    exp = info.get("profiler_info", {}).get("config", {}).get("experimental_config", {})
    lvl = exp.get("_profiler_level") if isinstance(exp, dict) else None
    return lvl if isinstance(lvl, str) else None
