"""Kineto load speed, as ratios measured in the same run (each figure in a fresh process).

For each size (default 100, 500, 1000 MB) it generates a trace with gen_trace.py and measures:

- ``msgspec``: a bare typed msgspec decode of the file (read + decode into Structs of the fields
  opscope reads), the floor any Python-level reader starts from;
- ``cold``: ``opscope.load(path, cache=False)`` (read, decode, build tables, link);
- ``cached``: ``opscope.load(path)`` from the cache plus a hotspot table (top ops by total time);
- peak RSS of the cold load; and, if ``holistictraceanalysis`` is installed, HTA's
  ``TraceAnalysis`` parse of the same file.

    python benchmarks/load_speed.py [--sizes 100 500 1000] [--gzip] [--no-hta] [--dir DIR] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

MSGSPEC = r"""
import resource, sys, time
t = time.perf_counter()
import msgspec
from opscope.ingest.jsonscan import Event
class Trace(msgspec.Struct, gc=False):
    traceEvents: list[Event]
data = open(sys.argv[1], "rb").read()
if data[:2] == b"\x1f\x8b":
    from opscope.ingest.gz import gunzip_bytes
    data = gunzip_bytes(data)
n = len(msgspec.json.decode(data, type=Trace).traceEvents)
r = resource.getrusage(resource.RUSAGE_SELF)
print(time.perf_counter() - t, r.ru_maxrss * 1024, n, r.ru_utime + r.ru_stime)
"""

COLD = r"""
import resource, sys, time
t = time.perf_counter()
import opscope
p = opscope.load(sys.argv[1], cache=False)
r = resource.getrusage(resource.RUSAGE_SELF)
print(time.perf_counter() - t, r.ru_maxrss * 1024, p.events.height, r.ru_utime + r.ru_stime)
"""

CACHED = r"""
import resource, sys, time
t = time.perf_counter()
import polars as pl
import opscope
p = opscope.load(sys.argv[1])
assert p.meta.get("from_cache"), "cache miss"
top = (p.ops.group_by("name").agg(pl.len().alias("calls"), pl.col("dur_ns").sum().alias("total"))
       .sort("total", descending=True).head(10))
r = resource.getrusage(resource.RUSAGE_SELF)
print(time.perf_counter() - t, r.ru_maxrss * 1024, top.height, r.ru_utime + r.ru_stime)
"""

HTA = r"""
import os, resource, sys, time, shutil, tempfile
t = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
d = tempfile.mkdtemp()
shutil.copy(sys.argv[1], os.path.join(d, "rank-0.json"))
TraceAnalysis(trace_dir=d)
r = resource.getrusage(resource.RUSAGE_SELF)
print(time.perf_counter() - t, r.ru_maxrss * 1024, 0, r.ru_utime + r.ru_stime)
"""


def run(code: str, path: Path, src: Path | None = None) -> tuple[float, int, int, float]:
    """(wall s, peak RSS bytes, a count, CPU s of the child: less inflated by a busy machine).

    ``src``: import opscope from that ``src`` folder instead (another version, for before/after).
    """
    env = None
    if src is not None:
        env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True, env=env
    ).stdout.split()
    return float(out[0]), int(out[1]), int(out[2]), float(out[3])


def warm(path: Path) -> None:
    """Read ``path`` once, so that every measurement finds it in the page cache (the first would
    otherwise pay the disk alone: this VM's page cache does not keep a freshly written GB)."""
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


def has_hta() -> bool:
    r = subprocess.run(
        [sys.executable, "-c", "import hta.trace_analysis"], capture_output=True, check=False
    )
    return r.returncode == 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", type=float, nargs="+", default=[100.0, 500.0, 1000.0])
    ap.add_argument("--gzip", action="store_true", help="also time the .json.gz of each size")
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "opscope-bench")
    ap.add_argument("--keep", action="store_true", help="keep the generated traces")
    ap.add_argument("--no-hta", action="store_true", help="skip HTA even if it is installed")
    ap.add_argument(
        "--baseline-src",
        type=Path,
        help="also time a cold load with opscope imported from this src folder (e.g. "
        "`git archive OLD src | tar -x -C /tmp/old`, then /tmp/old/src), in the same run",
    )
    a = ap.parse_args()
    sys.path.insert(0, str(HERE))
    from gen_trace import generate

    a.dir.mkdir(parents=True, exist_ok=True)
    hta = not a.no_hta and has_hta()
    rows = []
    for mb in a.sizes:
        path = a.dir / f"trace_{int(mb)}mb.json"
        if not path.exists():
            generate(path, mb, seed=0)
        size = path.stat().st_size
        warm(path)
        ms_t, ms_rss, n, ms_cpu = run(MSGSPEC, path)
        cold_t, cold_rss, n_ev, cold_cpu = run(COLD, path)
        run(COLD.replace("cache=False", "cache=True"), path)  # write the cache
        cached_t, _, _, cached_cpu = run(CACHED, path)
        row = {
            "mb": round(size / 2**20, 1),
            "events_in_file": n,
            "rows": n_ev,
            "msgspec_s": round(ms_t, 3),
            "cold_s": round(cold_t, 3),
            "cold_vs_msgspec": round(cold_t / ms_t, 2),
            "msgspec_cpu_s": round(ms_cpu, 3),
            "cold_cpu_s": round(cold_cpu, 3),
            "cold_vs_msgspec_cpu": round(cold_cpu / ms_cpu, 2),
            "cold_s_per_gb": round(cold_t / (size / 2**30), 2),
            "peak_rss_gb": round(cold_rss / 2**30, 2),
            "msgspec_peak_rss_gb": round(ms_rss / 2**30, 2),
            "cached_reopen_hotspot_s": round(cached_t, 3),
            "cached_reopen_hotspot_cpu_s": round(cached_cpu, 3),
        }
        if a.baseline_src is not None:
            b_t, b_rss, _, b_cpu = run(COLD, path, a.baseline_src)
            row["baseline_cold_s"] = round(b_t, 3)
            row["baseline_cold_cpu_s"] = round(b_cpu, 3)
            row["baseline_peak_rss_gb"] = round(b_rss / 2**30, 2)
        if a.gzip:
            gzp = path.with_suffix(".json.gz")
            if not gzp.exists():
                generate(gzp, mb, seed=0, gz=True)
            warm(gzp)
            gz_t, _, _, _ = run(COLD, gzp)
            row["gzip_cold_s"] = round(gz_t, 3)
        if hta:
            warm(path)
            hta_t, hta_rss, _, _ = run(HTA, path)
            row["hta_s"] = round(hta_t, 3)
            row["hta_peak_rss_gb"] = round(hta_rss / 2**30, 2)
            row["hta_vs_cold"] = round(hta_t / cold_t, 1)
        rows.append(row)
        print(json.dumps(row), flush=True)
        if not a.keep:
            for p in a.dir.glob(f".{path.name}*"):
                import shutil

                shutil.rmtree(p, ignore_errors=True)
    if len(rows) > 1:
        base = rows[0]
        for r in rows[1:]:
            lin = (r["cold_s"] / base["cold_s"]) / (r["mb"] / base["mb"])
            print(f"linearity {base['mb']} MB -> {r['mb']} MB: time ratio / size ratio = {lin:.2f}")
    if not hta and not a.no_hta:
        print("HTA not installed (pip install HolisticTraceAnalysis) - skipped")


if __name__ == "__main__":
    main()
