"""Out-of-core load (issue 24): peak RSS and time of a budgeted cold load, against today's path.

For each size (default 1000 MB of text; ``--big`` adds 10000) it generates a ``.json.gz`` trace
with gen_trace.py and loads it cold (no cache), each load in a fresh process:

- ``in-memory``: ``opscope.load(path, cache=False)`` with no budget (today's path);
- ``budget``: the same with ``OPSCOPE_MEMORY_BUDGET`` (default 1 byte: always out-of-core).

It prints time, peak RSS (``ru_maxrss`` of the child) and events of each, and the budgeted load's
time over the in-memory load of the smallest size (linearity). Phase 1 streams the text only; the
tables are still built in memory (docs/out-of-core.md), so the peak is the tables'.

    python benchmarks/out_of_core.py [--sizes 1000 3000] [--big] [--budget 1] [--dir DIR] [--keep]
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

COLD = r"""
import resource, sys, time
t = time.perf_counter()
import opscope
p = opscope.load(sys.argv[1], cache=False)
r = resource.getrusage(resource.RUSAGE_SELF)
print(time.perf_counter() - t, r.ru_maxrss * 1024, p.events.height)
"""


def run(path: Path, budget: str | None) -> dict[str, float]:
    env = dict(os.environ)
    env.pop("OPSCOPE_MEMORY_BUDGET", None)
    if budget is not None:
        env["OPSCOPE_MEMORY_BUDGET"] = budget
    out = subprocess.run(
        [sys.executable, "-c", COLD, str(path)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode:
        raise SystemExit(out.stderr)
    t, rss, n = out.stdout.split()
    return {"s": round(float(t), 2), "peak_rss_gb": round(int(rss) / 1e9, 3), "events": int(n)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", type=float, nargs="+", default=[1000.0])
    ap.add_argument("--big", action="store_true", help="also 10000 MB (long on 2 cores)")
    ap.add_argument("--budget", default="1", help="OPSCOPE_MEMORY_BUDGET for the budgeted load")
    ap.add_argument("--skip-in-memory-above", type=float, default=1000.0)
    ap.add_argument("--dir", type=Path)
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    sys.path.insert(0, str(HERE))
    from gen_trace import generate

    sizes = sorted(set(a.sizes + ([10000.0] if a.big else [])))
    tmp = Path(a.dir or tempfile.mkdtemp(prefix="opscope-ooc-"))
    tmp.mkdir(parents=True, exist_ok=True)
    base: float | None = None
    for mb in sizes:
        path = tmp / f"gen_{int(mb)}mb.json.gz"
        if not path.exists():
            text = generate(path, mb, gz=True)
            print(f"# generated {path} ({text / 1e6:.0f} MB text)", flush=True)
        row: dict[str, object] = {"mb": mb, "gz_mb": round(path.stat().st_size / 1e6, 1)}
        if mb <= a.skip_in_memory_above:
            mem = run(path, None)
            row["in_memory"] = mem
            if base is None:
                base = mem["s"]
        got = run(path, a.budget)
        row["budget"] = got
        if base:
            row["time_vs_smallest_in_memory"] = round(got["s"] / base, 2)
        print(json.dumps(row), flush=True)
        if not a.keep:
            path.unlink()


if __name__ == "__main__":
    main()
