"""Report time against load time, per real trace: the full report must cost at most the cold load.

For each trace, in a fresh process, after one untimed load and report of the same trace (the
per-process costs: importing and compiling the modules each path needs, the scanner's JIT, the
libraries' first-use tables; the same for every trace and not what the 1x target is about; before
2026-12-04 only the report's were taken out, so the load's ~0.05 s (Ascend) to ~0.38 s (Kineto:
NumPy random, numba) of imports inflated the load and flattered the ratio):

- ``load``: ``opscope.load(path, cache=False)``, the cold load (read, decode, build, link);
- ``report``: what ``opscope report`` does after loading: every analysis, the rules' findings,
  the doctor's warnings (:func:`opscope.report.build.build_report`), then rendering to the
  terminal (as text) and to JSON.

It prints both (wall seconds), their ratio and OK/OVER against the 1x target, the same ratio in
CPU seconds (user + sys of every thread: steadier on a shared machine), and any report section
that failed (there must be none). With ``--repeat N`` each figure is the minimum of N fresh
processes. The exit status is 1 when a trace is over the target or has a failed section.

    python benchmarks/report_speed.py [PATH_OR_DIR ...] [--no-shared] [--repeat N] [--json OUT]

Default traces: every trace under ../shared/traces (Kineto files and Ascend profiler
directories); paths and directories given on the command line are added (a directory is searched
the same way).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHARED = HERE.parent.parent / "shared" / "traces"
TARGET = 1.0

ONE = r"""
import json, sys, time
import opscope
from opscope.report.build import build_report
from opscope.report.base import render

path = sys.argv[1]

def load():
    return opscope.load(path, cache=False)

def report(profile):
    rep = build_report(profile, top=20)
    render(rep, "terminal")
    render(rep, "json")
    return rep

# The process's first load and report, untimed: they import (and compile, where no bytecode is
# cached) the modules their path needs, JIT-compile the scanner's kernels, build Polars' and
# rich's tables: per-process costs, the same for every trace, paid once by a command. The timed
# pair below is a second cold load (cache=False: read, decode, build, link) and the report of
# that new Profile (nothing memoised carries over: results are kept per Profile object).
try:
    report(load())
except opscope.OpscopeError as e:  # not a trace opscope reads: said in one line, not timed
    print(json.dumps({"skipped": str(e)}))
    sys.exit(0)
t0, c0 = time.perf_counter(), time.process_time()
profile = load()
t1, c1 = time.perf_counter(), time.process_time()
rep = report(profile)
t2, c2 = time.perf_counter(), time.process_time()
print(json.dumps({
    "events": profile.events.height,
    "load_s": t1 - t0,
    "report_s": t2 - t1,
    "load_cpu_s": c1 - c0,
    "report_cpu_s": c2 - c1,
    "errors": [e.to_json() for e in rep.errors],
}))
"""


def discover(root: Path) -> list[Path]:
    """The traces under ``root``: Ascend profiler directories (holding ASCEND_PROFILER_OUTPUT)
    and Kineto ``.json``/``.json.gz`` files outside them; hidden paths (caches) skipped."""
    if root.is_file():
        return [root]
    ascend = sorted(p.parent for p in root.rglob("ASCEND_PROFILER_OUTPUT") if not _hidden(p, root))
    files = sorted(
        p
        for p in root.rglob("*")
        if p.is_file()
        and p.name.endswith((".json", ".json.gz"))
        and not _hidden(p, root)
        and not any(a in p.parents for a in ascend)
    )
    return ascend + files


def _hidden(p: Path, root: Path) -> bool:
    return any(part.startswith(".") for part in p.relative_to(root).parts)


def measure(path: Path, repeat: int) -> dict[str, object]:
    """The minimum load and report seconds over ``repeat`` fresh processes."""
    best: dict[str, object] = {}
    for _ in range(repeat):
        out = subprocess.run(
            [sys.executable, "-c", ONE, str(path)], capture_output=True, text=True, check=False
        )
        if out.returncode != 0:
            tail = (out.stderr.strip().splitlines() or ["?"])[-1]
            return {"failed": tail}
        r: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
        if "skipped" in r:
            return r
        if not best:
            best = r
        else:
            for k in ("load_s", "report_s", "load_cpu_s", "report_cpu_s"):
                best[k] = min(float(best[k]), float(r[k]))  # type: ignore[arg-type]
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("paths", nargs="*", type=Path, help="more traces or directories of traces")
    ap.add_argument("--no-shared", action="store_true", help="skip ../shared/traces")
    ap.add_argument("--repeat", type=int, default=1, help="fresh processes per trace (min)")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    traces: list[tuple[Path, Path]] = []  # (trace, the root it was found under)
    if not args.no_shared and SHARED.is_dir():
        traces += [(t, SHARED) for t in discover(SHARED)]
    for p in args.paths:
        traces += [(t, p) for t in discover(p)]
    if not traces:
        print("no traces: give paths, or put the shared traces at ../shared/traces")
        return 2
    rows = []
    over = failed = 0
    # a shared machine's load moves the wall figures: say what it was (1, 5, 15 min averages)
    print("load average at start: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    print(
        f"{'trace':<64} {'events':>7} {'load s':>7} {'report s':>8} {'ratio':>6} "
        f"{'CPU ratio':>9}  verdict"
    )
    for path, root in traces:
        r = measure(path, args.repeat)
        # named from its root (db/level0/rank0_ascend_pt, not rank0_ascend_pt three times)
        rel = path.relative_to(root) if root.is_dir() and path != root else Path(path.name)
        name = str(rel)[-64:]
        if "skipped" in r:
            print(f"{name:<64} skipped: {r['skipped']}"[:160])
            continue
        if "failed" in r:
            failed += 1
            print(f"{name:<64} FAILED: {r['failed']}")
            rows.append({"trace": name, **r})
            continue
        load_s, report_s = float(r["load_s"]), float(r["report_s"])  # type: ignore[arg-type]
        ratio = report_s / load_s if load_s > 0 else float("inf")
        cpu = float(r["report_cpu_s"]) / max(float(r["load_cpu_s"]), 1e-9)  # type: ignore[arg-type]
        errs = r.get("errors") or []
        verdict = "OK" if ratio <= TARGET else "OVER"
        over += verdict == "OVER"
        failed += bool(errs)
        extra = f"  {len(errs)} section(s) failed: {errs}" if errs else ""  # type: ignore[arg-type]
        print(
            f"{name:<64} {r['events']:>7} {load_s:>7.3f} {report_s:>8.3f} {ratio:>6.2f} "
            f"{cpu:>9.2f}  {verdict}{extra}"
        )
        rows.append({"trace": name, **r, "ratio": ratio, "cpu_ratio": cpu, "verdict": verdict})
    ratios = sorted(float(r["ratio"]) for r in rows if "ratio" in r)  # type: ignore[arg-type]
    if ratios:
        print(
            f"\n{len(ratios)} traces: report/load median {ratios[len(ratios) // 2]:.2f}, "
            f"max {ratios[-1]:.2f}; {over} over the {TARGET:g}x target; "
            f"{failed} with a failed section or run"
        )
    print("load average at end: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 1 if over or failed else 0


if __name__ == "__main__":
    sys.exit(main())
