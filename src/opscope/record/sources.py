"""The model's source files, copied into the run directory when a recording ends.

Reports show each line's forward and backward time next to its code, like a line profiler; the
run directory must carry that code so that it can be read on another machine (or after the
script changed). What is copied: the files whose lines ops were charged to (the call-site
annotator's files, when ``lines`` is on), the script itself, and the files defining the model's
module classes — only model code (:func:`opscope.model.usercode.is_model_file`).

Bounded: at most :data:`PER_FILE_BYTES` of each file (longer files are cut at a line end, and
said so) and :data:`TOTAL_BYTES` in all (files past it are listed as skipped); every line goes
through :func:`opscope.redact.redact_source_line`. Layout: ``sources/index.json`` maps each
original path to its copy (``sources/000.py``, ...) with its line count and whether it was cut.
Written to temporary names and renamed: a crash leaves no half-written index.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from opscope.model.usercode import is_model_file
from opscope.record import rundir
from opscope.redact import redact_source_line

PER_FILE_BYTES = 256 * 1024
TOTAL_BYTES = 4 * 1024 * 1024
DIR = "sources"
INDEX = "index.json"


def model_files(root: Any = None, seen: Iterable[str] = ()) -> list[str]:
    """Absolute paths of the model's source files: ``seen`` first (the files ops were charged
    to), then ``__main__``, then the files of ``root``'s module classes; model code only."""
    out: dict[str, None] = {}
    for f in seen:
        out.setdefault(f, None)
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    if isinstance(main, str):
        out.setdefault(main, None)
    if root is not None and hasattr(root, "modules"):
        for mod in root.modules():
            try:
                src = inspect.getsourcefile(type(mod))
            except (TypeError, OSError):
                continue
            if src:
                out.setdefault(src, None)
    return [f for f in out if is_model_file(f) and Path(f).is_file()]


def capture(
    out: Path,
    files: Iterable[str],
    *,
    per_file: int = PER_FILE_BYTES,
    total: int = TOTAL_BYTES,
) -> dict[str, Any]:
    """Copy ``files`` (redacted, bounded) into ``out/sources``; returns the index written."""
    dest = out / DIR
    index: dict[str, Any] = {"files": {}, "skipped": [], "per_file_bytes": per_file}
    used = 0
    for i, name in enumerate(dict.fromkeys(files)):
        try:
            raw = Path(name).read_bytes()
        except OSError:
            continue
        cut = len(raw) > per_file
        if cut:
            raw = raw[: raw.rfind(b"\n", 0, per_file) + 1]
        if used + len(raw) > total:
            index["skipped"].append(name)
            continue
        text = raw.decode("utf-8", "replace")
        lines = [redact_source_line(line) for line in text.splitlines()]
        body = "\n".join(lines) + "\n"
        stored = f"{i:03d}.py"
        dest.mkdir(parents=True, exist_ok=True)
        rundir.atomic_write_bytes(dest / stored, body.encode("utf-8"))
        used += len(raw)
        index["files"][str(Path(name).resolve())] = {
            "copy": stored,
            "lines": len(lines),
            "truncated": cut,
        }
    if index["files"] or index["skipped"]:
        dest.mkdir(parents=True, exist_ok=True)
        rundir.atomic_write_json(dest / INDEX, index)
    return index
