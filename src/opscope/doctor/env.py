"""The recording environment a trace carries, for ``--show-env``.

Readers redact secrets before anything reaches a Profile (or its cache), so the raw values exist
only in the source files. This module re-reads just the metadata of those files: the top-level
keys of a Kineto trace (not its events) and an Ascend run's ``profiler_info*.json`` /
``profiler_metadata.json``. Blocks whose key has ``env``, ``environ`` or ``environment`` as a word
part (``env``, ``ENV_VARIABLES``, ``env_list``) are returned, redacted unless ``show_env=True``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import msgspec

from opscope.errors import InputError
from opscope.redact import redact

# "env", "environ", "ENV_VARIABLES", "env_list", "process-environment"... as a word part.
_ENV_KEY: Final = re.compile(r"(^|[_\-.])(env|envs|environ|environment)([_\-.]|$)", re.IGNORECASE)
_TOP: Final = msgspec.json.Decoder(dict[str, msgspec.Raw])
# Directories can hold thousands of traces; the environment is the same for all of a run's ranks.
_MAX_SOURCES: Final = 64
_MAX_DEPTH: Final = 32


def _env_blocks(obj: Any, prefix: str, out: dict[str, Any], depth: int = 0) -> None:
    if depth > _MAX_DEPTH or not isinstance(obj, Mapping):
        return
    for k, v in obj.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(k, str) and _ENV_KEY.search(k) and isinstance(v, Mapping | list):
            out[key] = v
        else:
            _env_blocks(v, key, out, depth + 1)


def kineto_header(path: Path) -> dict[str, Any]:
    """Top-level keys of a Kineto trace other than ``traceEvents`` (raw, unredacted)."""
    from opscope.ingest import gz

    data = gz.read_bytes(path)
    try:
        top = _TOP.decode(data)
    except msgspec.DecodeError:
        raise InputError("not valid JSON: cannot read its metadata", path) from None
    out: dict[str, Any] = {}
    for k, v in top.items():
        if k == "traceEvents":
            continue
        try:
            out[k] = msgspec.json.decode(v)
        except msgspec.DecodeError:
            continue
    return out


def _ascend_meta(path: Path) -> dict[str, Any]:
    root = path.parent if path.name == "ASCEND_PROFILER_OUTPUT" else path
    out: dict[str, Any] = {}
    for f in [*sorted(root.glob("profiler_info*.json")), root / "profiler_metadata.json"]:
        if f.is_file():
            try:
                out[f.name] = json.loads(f.read_text(encoding="utf-8-sig", errors="replace"))
            except (ValueError, OSError):
                continue
    return out


def _sources(path: Path) -> list[tuple[Path, str]]:
    from opscope.ingest import ascend, multirank, rundir
    from opscope.ingest.registry import sniff

    kind = sniff(path)
    if kind == "kineto":
        return [(path, "kineto")]
    if kind == "ascend":
        return [(path, "ascend")]
    if kind == "rundir":
        found = [(p, fmt) for _, p, fmt in rundir.list_traces(path)]
    else:
        found = [(p, fmt) for _, p, fmt in multirank.list_ranks(path)]
    return [(p, "ascend" if ascend.is_ascend_dir(p) else fmt) for p, fmt in found][:_MAX_SOURCES]


def trace_env(path: str | Path, *, show_env: bool = False) -> dict[str, dict[str, Any]]:
    """``{source: {"metadata.system.env": {...}, ...}}`` for every trace under ``path``.

    Values of secret-looking names are ``"<redacted>"`` unless ``show_env``. A source whose
    metadata cannot be read is left out (the load itself reports bad input).
    """
    out: dict[str, dict[str, Any]] = {}
    for src, fmt in _sources(Path(path)):
        try:
            meta = kineto_header(src) if fmt == "kineto" else _ascend_meta(src)
        except InputError:
            continue
        blocks: dict[str, Any] = {}
        _env_blocks(meta, "", blocks)
        if blocks:
            out[str(src)] = redact(blocks, show_env=show_env)
    return out
