"""Lazy analyses (issue 24, phase 4): hotspots + breakdown on a cached, file-backed profile.

Builds, once, in ``--dir`` (default ``/work/lazy``; never the repo):

1. ``gen_<MB>.json``: a generated trace (benchmarks/gen_trace.py, default 1000 MB of text);
2. ``x1.opscope``: its Profile loaded in memory and saved (``Profile.save``: the cache format);
3. ``x<K>.opscope``: K copies of it end to end (default 10, ~25 M events): the events Parquet
   concatenated with ``ts_ns`` shifted by the copy's span, ids (``id``, ``parent_id``,
   ``launch_id``, ``op_id``, ``fwd_id``) by the event count and ``step`` by the step count,
   streamed (``scan_parquet(...).sink_parquet``, one row group run per copy), never whole in
   memory; flows, memory, counters, steps, metrics and kernel_metrics likewise; stacks,
   devices, threads, modules kept; ``meta["out_of_core"]`` set, as the out-of-core load marks
   its result.

Then ``hotspots`` and ``breakdown`` each run in a fresh process (killed if its RSS passes
``--rss-cap``, default 6G) on ``Profile.open(entry, lazy=True)``; one JSON row per run with the
analysis' time, the peak RSS (``ru_maxrss``, the open and the reading included) and the load
average, for the lazy path (what opscope does on a large or out-of-core profile: the events
columns the analysis reads, alone) and, with ``--in-memory``, today's path (the events table read
whole first; its read is in the peak, not in the time).

    python benchmarks/lazy_analyses.py [--mb 1000] [--copies 10] [--dir /work/lazy]
        [--in-memory] [--rss-cap 6G] [--only x1|xK]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from out_of_core import _bytes, _rss  # the same RSS probe and size parser

HERE = Path(__file__).resolve().parent

CHILD = r"""
import json, resource, sys, time
from opscope.analysis import hotspots as hs
from opscope.analysis.breakdown import breakdown
from opscope.analysis.registry import Options
from opscope.model import Profile
entry, mode, which = sys.argv[1], sys.argv[2], sys.argv[3]
# lazy: what opscope does on a large or out-of-core profile; in_memory: the events read whole
hs.LAZY_FILE_BYTES = 0 if mode == "lazy" else 1 << 62
t = time.perf_counter()
p = Profile.open(entry, lazy=True)
if mode == "in_memory":
    p = p.with_meta(out_of_core=False)  # the copies' mark would take the lazy path
    _ = p.events
out = {"mode": mode, "analysis": which, "open_s": round(time.perf_counter() - t, 3)}
t = time.perf_counter()
res = hs.hotspots(p, Options()) if which == "hotspots" else breakdown(p, Options())
out["s"] = round(time.perf_counter() - t, 3)
out["peak_rss_gb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3)
out["rows"] = res.ops.height if which == "hotspots" else res.steps.height
print(json.dumps(out))
"""

ID_COLUMNS = ("id", "parent_id", "launch_id", "op_id", "fwd_id")


def build_x1(d: Path, mb: int, cap: int) -> Path:
    entry = d / "x1.opscope"
    if (entry / "meta.json").exists():
        return entry
    trace = d / f"gen_{mb}.json"
    if not trace.exists():
        subprocess.run(
            [sys.executable, str(HERE / "gen_trace.py"), str(trace), "--mb", str(mb)], check=True
        )
    code = (
        "import sys; from pathlib import Path; from opscope.ingest import kineto; "
        "kineto.parse_kineto(Path(sys.argv[1])).save(sys.argv[2])"
    )
    rc, _, err = watched([sys.executable, "-c", code, str(trace), str(entry)], cap)
    if rc:
        raise SystemExit(f"loading {trace} failed: {err.strip().splitlines()[-1:]}")
    return entry


def build_copies(src: Path, k: int) -> Path:
    """``k`` copies of the entry ``src`` end to end, streamed table by table."""
    import polars as pl

    out = src.with_name(f"x{k}.opscope")
    if (out / "meta.json").exists():
        return out
    tmp = src.with_name(f".x{k}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    meta = json.loads((src / "meta.json").read_text())
    ev = pl.scan_parquet(src / "events.parquet")
    n_ev, t0, t1 = (
        ev.select(
            pl.len(),
            pl.col("ts_ns").min().alias("t0"),
            (pl.col("ts_ns") + pl.col("dur_ns")).max().alias("t1"),
        )
        .collect()
        .row(0)
    )
    steps = pl.read_parquet(src / "steps.parquet")
    n_steps = int(steps.get_column("step").max() or 0) + 1 if steps.height else 0
    shift_ts = int(t1 - t0) + 1_000_000  # the copies 1 ms apart

    def shifted(table: str, i: int) -> pl.LazyFrame:
        lf = pl.scan_parquet(src / f"{table}.parquet")
        names = lf.collect_schema().names()
        ex = []
        for c in names:
            if c == "ts_ns":
                ex.append(pl.col(c) + i * shift_ts)
            elif c in ID_COLUMNS or c in ("src_id", "dst_id", "event_id"):
                ex.append(pl.col(c) + i * n_ev)
            elif c == "step":
                ex.append(pl.col(c) + i * n_steps)
        return lf.with_columns(ex) if ex else lf

    sizes = {}
    for table in meta["table_bytes"]:
        target = tmp / f"{table}.parquet"
        if table in ("stacks", "devices", "threads", "modules"):
            shutil.copyfile(src / f"{table}.parquet", target)
        else:
            parts = [shifted(table, i) for i in range(k)]
            pl.concat(parts).sink_parquet(
                target, compression="zstd", compression_level=1, statistics=False
            )
        sizes[table] = target.stat().st_size
    meta["table_bytes"] = sizes
    meta["out_of_core"] = True
    meta["copies"] = k
    (tmp / "meta.json").write_text(json.dumps(meta))
    tmp.rename(out)
    return out


def run_child(entry: Path, mode: str, which: str, cap: str) -> dict[str, object]:
    env = {**os.environ, "POLARS_MAX_THREADS": os.environ.get("POLARS_MAX_THREADS", "2")}
    cmd = [sys.executable, "-c", CHILD, str(entry), mode, which]
    rc, out, err = watched(cmd, _bytes(cap), env)
    if rc:
        tail = (err or out).strip().splitlines()[-1:] or ["?"]
        return {"mode": mode, "analysis": which, "failed": f"rc {rc}: {tail[0][:200]}"}
    row: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return row


def watched(cmd: list[str], cap: int, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """Run ``cmd``; kill it when its RSS passes ``cap`` bytes (a shared machine must not run out
    of memory). Returns (exit code, stdout, stderr); -9 and a note when killed."""
    import tempfile
    import time

    with tempfile.TemporaryFile("w+") as fo, tempfile.TemporaryFile("w+") as fe:
        proc = subprocess.Popen(cmd, stdout=fo, stderr=fe, text=True, env=env)
        killed = False
        while proc.poll() is None:
            if _rss(proc.pid) > cap:
                proc.kill()
                killed = True
            time.sleep(0.1)
        fo.seek(0)
        fe.seek(0)
        out, err = fo.read(), fe.read()
    if killed:
        return -9, out, err + f"\nkilled: RSS over the cap ({cap / 2**30:.1f} GiB)"
    return proc.returncode, out, err


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=1000)
    ap.add_argument("--copies", type=int, default=10)
    ap.add_argument("--dir", type=Path, default=Path("/work/lazy"))
    ap.add_argument("--in-memory", action="store_true", help="also run today's path")
    ap.add_argument("--rss-cap", default="6G", help="RSS at which a child is killed")
    ap.add_argument("--only", choices=["x1", "xK"], default=None)
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()
    a.dir.mkdir(parents=True, exist_ok=True)
    x1 = build_x1(a.dir, a.mb, _bytes(a.rss_cap))
    entries = {"x1": x1}
    if a.copies > 1 and a.only != "x1":
        entries["xK"] = build_copies(x1, a.copies)
    if a.only:
        entries = {a.only: entries[a.only]}
    for label, entry in entries.items():
        n = json.loads((entry / "meta.json").read_text())["table_bytes"]["events"]
        modes = ["lazy", "in_memory"] if a.in_memory else ["lazy"]
        for mode in modes:
            for which in ("hotspots", "breakdown"):
                for _ in range(a.repeat):
                    row: dict[str, object] = {"entry": label, "events_mb": round(n / 2**20, 1)}
                    row.update(run_child(entry, mode, which, a.rss_cap))
                    row["load"] = os.getloadavg()[0]
                    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
