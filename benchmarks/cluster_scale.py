"""Cluster analysis at scale: 64 ranks × 50 MB Kineto traces with NCCL all-reduces.

Generates the ranks (``benchmarks/gen_trace.py``'s steps plus one ``ncclDevKernel_AllReduce``
per step on stream 20, a ``distributedInfo`` with the rank; rank :data:`SLOW_RANK` enters every
all-reduce :data:`SLOW_US` µs late), then times ``run_cluster`` cold (``cache=False``: every
rank is parsed) in a fresh process per configuration:

- local engine, 1 worker vs 2 workers (target: 2 workers ≤ 0.6× one);
- Ray engine (local ``ray.init(num_cpus=2)``) vs local with 2 workers (target ≤ 1.3×);
- the parent's peak RSS (target ≤ 1 GB), from ``getrusage(RUSAGE_SELF)`` in that process.

    python benchmarks/cluster_scale.py [--small] [--ranks N] [--mb MB] [--dir DIR] [--no-ray]

``--small``: 4 ranks × 5 MB, a quick check. Generated traces are kept in ``--dir``
(default: a temporary folder, removed at the end).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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
    slow = SLOW_RANK % ranks
    late = {r: (SLOW_US if r == slow else (r % 7) * 3.0) for r in range(ranks)}
    last = max(late.values())
    for r in range(ranks):
        off = late[r]

        def shift(m: re.Match[str], off: float = off) -> str:
            ts, dur = float(m.group(2)), float(m.group(4))
            return f"{m.group(1)}{ts + off:.3f}{m.group(3)}{dur + last - off:.3f}"

        out = _KERNEL.sub(shift, text).replace(
            '"distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1}',
            f'"distributedInfo": {{"backend": "nccl", "rank": {r}, "world_size": {ranks}}}',
            1,
        )
        (folder / f"rank-{r}.json").write_text(out)


_CHILD = """
import json, resource, sys, time
from opscope.cluster import run_cluster
path, engine, workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
t = time.perf_counter()
res = run_cluster(path, engine=engine, workers=workers, cache=False)
wall = time.perf_counter() - t
out = res.to_json()
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"wall_s": wall, "rss_mb": rss,
                  "slow_ranks": out["slow_ranks"], "ranks": len(out["ranks"]),
                  "result": {k: v for k, v in out.items() if k != "engine"}}))
"""


def run(path: Path, engine: str, workers: int) -> dict[str, object]:
    """One configuration in a fresh process; returns its wall time, peak RSS and result."""
    r = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path), engine, str(workers)],
        capture_output=True,
        text=True,
        check=False,
    )
    if r.returncode != 0:
        raise SystemExit(f"{engine} x{workers} failed:\n{r.stderr[-3000:]}")
    line = [x for x in r.stdout.splitlines() if x.startswith("{")][-1]
    out: dict[str, object] = json.loads(line)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--small", action="store_true", help="4 ranks x 5 MB")
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--mb", type=float, default=50.0)
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--no-ray", action="store_true")
    ap.add_argument("--no-one", action="store_true", help="skip the 1-worker run")
    a = ap.parse_args()
    ranks, mb = (4, 5.0) if a.small else (a.ranks, a.mb)
    folder = a.dir or Path(tempfile.mkdtemp(prefix="opscope-cluster-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    try:
        if len(list(folder.glob("rank-*.json"))) != ranks:
            t = time.perf_counter()
            make_ranks(folder, ranks, mb)
            print(f"generated {ranks} ranks x {mb:g} MB in {time.perf_counter() - t:.1f} s")
        two = run(folder, "local", 2)
        print(f"slow ranks found: {two['slow_ranks']} (planted: [{SLOW_RANK % ranks}])")
        print(f"local  2 workers: {two['wall_s']:7.1f} s  parent peak RSS {two['rss_mb']:.0f} MB")
        if not a.no_one:
            one = run(folder, "local", 1)
            print(
                f"local  1 worker : {one['wall_s']:7.1f} s  parent peak RSS {one['rss_mb']:.0f} MB"
                f"  2 workers / 1 worker {float(two['wall_s']) / float(one['wall_s']):.2f}"
                " (target <= 0.6)"
            )
            assert one["result"] == two["result"], "1 and 2 workers disagree"
        if not a.no_ray:
            ray = run(folder, "ray", 2)
            print(
                f"ray    2 CPUs   : {ray['wall_s']:7.1f} s  parent peak RSS {ray['rss_mb']:.0f} MB"
                f"  ratio vs local {float(ray['wall_s']) / float(two['wall_s']):.2f}"
                " (target <= 1.3)"
            )
            assert ray["result"] == two["result"], "ray and local disagree"
    finally:
        if a.dir is None:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
