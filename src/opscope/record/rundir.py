"""The run directory: run.json, model.json, metrics.jsonl, rank{R}/ traces.

Whole files are written to a temporary file and renamed; metrics.jsonl is appended one complete
line per write so a killed run leaves every finished step readable. Nothing here records
environment variables; command-line values after secret-looking flags are redacted.
"""

from __future__ import annotations

import gzip
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from opscope.errors import RecordError

FORMAT_VERSION = 1
# Compressed bytes per active step assumed when checking free disk before a run starts.
EST_TRACE_BYTES_PER_STEP = 32 * 1024 * 1024
_SECRET = re.compile(r"(token|secret|passw|api[-_]?key|auth|credential|private)", re.I)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same folder and a rename."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON, atomically."""
    atomic_write_bytes(path, (json.dumps(obj, indent=1) + "\n").encode())


def gzip_file_atomic(src: Path, dst: Path) -> None:
    """Compress ``src`` into ``dst`` (temp + rename) and delete ``src``."""
    tmp = dst.with_name(f".{dst.name}.tmp")
    try:
        import isal.igzip as gz

        opener: Any = gz.open
    except ImportError:
        opener = gzip.open
    with src.open("rb") as fi, opener(tmp, "wb") as fo:
        shutil.copyfileobj(fi, fo, 1 << 20)
    os.replace(tmp, dst)
    src.unlink(missing_ok=True)


def free_disk_bytes(path: Path) -> int:
    """Free bytes on the filesystem holding ``path`` (or its nearest existing parent)."""
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    return int(shutil.disk_usage(p).free)


def prepare_out_dir(out: Path, *, active_steps: int, allow_existing: bool) -> None:
    """Create ``out`` and check it is writable and has room; RecordError otherwise."""
    need = max(active_steps, 1) * EST_TRACE_BYTES_PER_STEP
    if out.exists() and not out.is_dir():
        raise RecordError("output path exists and is not a directory", out)
    if out.is_dir() and (out / "run.json").exists() and not allow_existing:
        raise RecordError("output directory already holds a run", out)
    free = free_disk_bytes(out)
    if free < need:
        raise RecordError(
            f"not enough free disk: {free // 2**20} MiB free, about {need // 2**20} MiB needed "
            "for the trace",
            out,
        )
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".opscope-write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise RecordError(f"output directory is not writable ({e.strerror})", out) from None


def redact_argv(argv: list[str]) -> list[str]:
    """The command line with values of secret-looking options replaced by ``***``."""
    out: list[str] = []
    hide_next = False
    for a in argv:
        if hide_next:
            out.append("***")
            hide_next = False
            continue
        if a.startswith("-") and _SECRET.search(a):
            if "=" in a:
                out.append(a.split("=", 1)[0] + "=***")
            else:
                out.append(a)
                hide_next = True
            continue
        out.append(a)
    return out


def git_commit(cwd: Path) -> dict[str, Any] | None:
    """The git commit of ``cwd`` and whether the tree is dirty; None outside a repository."""
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
        if sha.returncode != 0:
            return None
        st = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
        return {"commit": sha.stdout.strip(), "dirty": bool(st.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return None


def device_processes(kind: str) -> dict[str, Any]:
    """Other processes on the device at start, from nvidia-smi / npu-smi when present."""
    if kind in ("cuda",):
        tool = shutil.which("nvidia-smi")
        if tool is None:
            return {"processes": [], "reason": "nvidia-smi not found"}
        try:
            r = subprocess.run(
                [
                    tool,
                    "--query-compute-apps=pid,process_name,used_memory",
                    "--format=csv,noheader,nounits",
                ],
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            )
        except (OSError, subprocess.SubprocessError) as e:
            return {"processes": [], "reason": f"nvidia-smi failed: {e}"}
        procs = []
        for line in r.stdout.splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) == 3 and parts[0].isdigit() and int(parts[0]) != os.getpid():
                mem = int(parts[2]) if parts[2].isdigit() else None
                procs.append({"pid": int(parts[0]), "name": parts[1], "memory_mib": mem})
        return {"processes": procs, "reason": None}
    if kind == "npu":
        tool = shutil.which("npu-smi")
        if tool is None:
            return {"processes": [], "reason": "npu-smi not found"}
        try:
            r = subprocess.run(
                [tool, "info"], capture_output=True, text=True, timeout=10, check=False
            )
        except (OSError, subprocess.SubprocessError) as e:
            return {"processes": [], "reason": f"npu-smi failed: {e}"}
        procs = []
        for line in r.stdout.splitlines():
            cells = [c.strip() for c in line.strip("|").split("|")]
            # process rows look like: | 0 0 | 12345 | python | 1024 |
            if len(cells) >= 4 and cells[1].isdigit() and int(cells[1]) != os.getpid():
                procs.append({"pid": int(cells[1]), "name": cells[2], "memory_mib": None})
        return {"processes": procs, "reason": None}
    return {"processes": [], "reason": f"no process query for device kind {kind!r}"}


def versions() -> dict[str, Any]:
    """Python, torch, CUDA, ROCm and CANN versions (None when absent)."""
    import torch

    cann = None
    if "torch_npu" in sys.modules:
        tn: Any = sys.modules["torch_npu"]
        ver: Any = getattr(tn, "version", None)
        cann = getattr(ver, "cann", None) or getattr(tn, "__version__", None)
    return {
        "python": platform.python_version(),
        "torch": str(torch.__version__),
        "cuda": getattr(torch.version, "cuda", None),
        "rocm": getattr(torch.version, "hip", None),
        "cann": None if cann is None else str(cann),
    }


def host() -> str:
    """The host name."""
    return socket.gethostname()
