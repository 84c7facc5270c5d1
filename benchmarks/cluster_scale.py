"""Cluster analysis at scale: many generated Kineto ranks with NCCL all-reduces.

Generates the ranks (``benchmarks/gen_trace.py``'s steps plus one ``ncclDevKernel_AllReduce``
per step on stream 20, a ``distributedInfo`` with the rank; rank :data:`SLOW_RANK` enters every
all-reduce :data:`SLOW_US` µs late). One base trace is generated; every rank is derived from it by
rewriting the rank id and shifting its all-reduce kernels (a join of pre-split text, ~5 ms per
5 MB rank), so 1,000 ranks take about a minute. Then it times ``run_cluster`` cold
(``cache=False``: every rank is parsed) in a fresh process per configuration:

- Ray engine (a local ``ray.init(num_cpus=N)``), 1 CPU vs 2 CPUs (target: 2 ≤ 0.6× one);
- local engine (spawned process pool), 1 worker vs 2 workers (same target);
- per run: wall time, CPU seconds of the driver and of all its descendant processes (the pool
  workers, Ray's raylet and workers; sampled with psutil every 0.25 s), the load average of the
  machine before and after, the driver's peak RSS (target ≤ 1 GB, ``getrusage``) and its RSS
  over time (``--rss-log``).

Every configuration's JSON result must be equal (the same analysis whatever the engine).

    python benchmarks/cluster_scale.py [--small] [--ranks N] [--mb MB] [--dir DIR]
        [--configs ray1,ray2,local1,local2] [--repeat R] [--jsonl OUT] [--keep]

Issue 24's configuration: ``--ranks 1000 --mb 5 --dir /work/big_ranks`` (~5.3 GB on disk).
``--small``: 4 ranks × 5 MB, a quick check. The generated folder is deleted at the end unless
``--keep`` (a folder that already holds the ranks is reused).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from gen_trace import Gen, generate

SLOW_RANK = 5
SLOW_US = 2000.0
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
NCCL_DUR_US = 150.0


class NcclGen(Gen):
    """gen_trace's steps with one NCCL all-reduce kernel at the end of each step."""

    def step(self, n: int, layers: int) -> None:
        super().step(n, layers)
        end = self.t - 20.0  # gen_trace leaves 20 µs after each step
        # Early enough that the latest rank's kernel still starts inside the step.
        ts = end - NCCL_DUR_US - SLOW_US - 50.0
        self.x(
            "kernel",
            NCCL,
            ts,
            NCCL_DUR_US,
            '      "device": 0, "stream": 20, "Collective name": "allreduce", '
            '"In msg nelems": 1048576, "dtype": "Float", "Group size": 64, '
            '"Process Group Name": "0"',
            pid=0,
            tid=20,
        )


_KERNEL = re.compile(
    r'("name": "' + NCCL + r'", "pid": 0, "tid": 20,\s+"ts": )([0-9.]+)(, "dur": )([0-9.]+)'
)


def make_ranks(folder: Path, ranks: int, mb: float) -> None:
    """Write ``rank-N.json`` for N in 0..ranks-1 (one generated base, NCCL times shifted)."""
    import gen_trace

    base = folder / "base.json"
    gen_trace.Gen = NcclGen  # type: ignore[misc]
    generate(base, mb, seed=0)
    text = base.read_text()
    base.unlink()
    dist = '"distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1}'
    head, sep, text = text.partition(dist)
    assert sep, "the generator's distributedInfo moved"
    # Split once: text between the kernels' (ts, dur) pairs; each rank only joins.
    pieces: list[str] = []
    times: list[tuple[float, float]] = []
    at = 0
    for m in _KERNEL.finditer(text):
        pieces.append(text[at : m.start(2)])
        pieces.append(m.group(3))
        times.append((float(m.group(2)), float(m.group(4))))
        at = m.end(4)
    tail = text[at:]
    slow = SLOW_RANK % ranks
    late = {r: (SLOW_US if r == slow else (r % 7) * 3.0) for r in range(ranks)}
    last = max(late.values())
    for r in range(ranks):
        off = late[r]
        out = [
            head,
            f'"distributedInfo": {{"backend": "nccl", "rank": {r}, "world_size": {ranks}}}',
        ]
        for i, (ts, dur) in enumerate(times):
            out += [pieces[2 * i], f"{ts + off:.3f}", pieces[2 * i + 1], f"{dur + last - off:.3f}"]
        out.append(tail)
        (folder / f"rank-{r}.json").write_text("".join(out))


_CHILD = """
import json, os, resource, sys, threading, time
import psutil
from opscope.cluster import run_cluster
path, engine, workers, rss_log = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
me = psutil.Process()
cpu = {}  # pid -> (user + system) seconds, the last seen: processes that end keep their figure
trace = []  # (s since start, driver RSS MB)
stop = threading.Event()
t0 = time.perf_counter()
def sample():
    while True:
        for p in me.children(recursive=True):
            try:
                c = p.cpu_times()
                cpu[p.pid] = c.user + c.system
            except psutil.Error:
                pass
        trace.append((round(time.perf_counter() - t0, 2), me.memory_info().rss / 2**20))
        if stop.wait(0.25):
            return
th = threading.Thread(target=sample, daemon=True)
th.start()
load0 = os.getloadavg()
t = time.perf_counter()
res = run_cluster(path, engine=engine, workers=workers, cache=False)
wall = time.perf_counter() - t
stop.set()
th.join()
own = me.cpu_times()
out = res.to_json()
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
if rss_log:
    with open(rss_log, "w") as f:
        f.writelines(f"{s}\\t{m:.0f}\\n" for s, m in trace)
print(json.dumps({"wall_s": wall, "rss_mb": rss, "driver_cpu_s": own.user + own.system,
                  "children_cpu_s": sum(cpu.values()), "load_before": load0,
                  "load_after": os.getloadavg(), "failed": out["failed_ranks"],
                  "slow_ranks": out["slow_ranks"], "ranks": len(out["ranks"]),
                  "result": {k: v for k, v in out.items() if k != "engine"}}))
"""


def run(path: Path, engine: str, workers: int, rss_log: str = "") -> dict[str, Any]:
    """One configuration in a fresh process; returns its figures and its result."""
    r = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path), engine, str(workers), rss_log],
        capture_output=True,
        text=True,
        check=False,
    )
    if r.returncode != 0:
        raise SystemExit(f"{engine} x{workers} failed:\n{r.stderr[-3000:]}")
    line = [x for x in r.stdout.splitlines() if x.startswith("{")][-1]
    out: dict[str, Any] = json.loads(line)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--small", action="store_true", help="4 ranks x 5 MB")
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--mb", type=float, default=50.0)
    ap.add_argument("--dir", type=Path, default=None, help="where to generate (not the repo)")
    ap.add_argument("--keep", action="store_true", help="keep the generated ranks")
    ap.add_argument("--configs", default="ray1,ray2,local1,local2")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--jsonl", type=Path, default=None, help="append each run's figures here")
    ap.add_argument("--rss-log", type=Path, default=None, help="folder for RSS-over-time logs")
    a = ap.parse_args()
    ranks, mb = (4, 5.0) if a.small else (a.ranks, a.mb)
    folder = a.dir or Path(tempfile.mkdtemp(prefix="opscope-cluster-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    configs = []
    for c in a.configs.split(","):
        m = re.fullmatch(r"(ray|local)(\d+)", c)
        if m is None:
            raise SystemExit(f"--configs: {c!r} is not ray<N> or local<N>")
        configs.append((m.group(1), int(m.group(2))))
    try:
        if len(list(folder.glob("rank-*.json"))) != ranks:
            t = time.perf_counter()
            make_ranks(folder, ranks, mb)
            gb = sum(f.stat().st_size for f in folder.glob("rank-*.json")) / 1e9
            print(
                f"generated {ranks} ranks x {mb:g} MB ({gb:.2f} GB) in "
                f"{time.perf_counter() - t:.1f} s",
                flush=True,
            )
        seen: dict[tuple[str, int], list[dict[str, Any]]] = {}
        first: dict[str, Any] | None = None
        for rep in range(a.repeat):
            for engine, n in configs:
                log = str(a.rss_log / f"rss-{engine}{n}-{rep}.tsv") if a.rss_log else ""
                if a.rss_log:
                    a.rss_log.mkdir(parents=True, exist_ok=True)
                out = run(folder, engine, n, log)
                if first is None:
                    first = out
                    print(
                        f"slow ranks found: {out['slow_ranks']} (planted: "
                        f"[{SLOW_RANK % ranks}]); failed: {out['failed']}"
                    )
                assert out["result"] == first["result"], f"{engine} x{n} disagrees"
                seen.setdefault((engine, n), []).append(out)
                cpu = out["driver_cpu_s"] + out["children_cpu_s"]
                print(
                    f"{engine:5} x{n} run {rep}: {out['wall_s']:7.1f} s wall, "
                    f"CPU {cpu:7.1f} s (driver {out['driver_cpu_s']:.1f}), driver peak RSS "
                    f"{out['rss_mb']:.0f} MB, load {out['load_before'][0]:.1f} -> "
                    f"{out['load_after'][0]:.1f}",
                    flush=True,
                )
                if a.jsonl:
                    row = {k: v for k, v in out.items() if k != "result"}
                    row.update(engine=engine, workers=n, rep=rep, ranks=ranks, mb=mb)
                    with a.jsonl.open("a") as f:
                        f.write(json.dumps(row) + "\n")
        for engine in ("ray", "local"):
            one, two = seen.get((engine, 1)), seen.get((engine, 2))
            if one and two:
                w1 = statistics.median(x["wall_s"] for x in one)
                w2 = statistics.median(x["wall_s"] for x in two)
                print(
                    f"{engine:5}: 2 workers / 1 worker = {w2 / w1:.2f} (median wall "
                    f"{w2:.1f} / {w1:.1f} s; target <= 0.6)"
                )
        rss = max(x["rss_mb"] for runs in seen.values() for x in runs)
        print(f"driver peak RSS, all runs: {rss:.0f} MB (target <= 1024)")
    finally:
        if not a.keep:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
