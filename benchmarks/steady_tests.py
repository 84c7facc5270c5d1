"""Run the timing-touching tests N times while other processes keep cores busy; count failures.

The tests marked ``timing`` (pytest's ``-m timing``) record real CPU runs, whose wall-clock
timing moves with the machine's load; they must assert only what that load cannot change. This
script checks that they do: it starts ``--busy`` busy-loop processes (one core each), runs the
marked tests (plus ``--also`` node ids from files that do not carry the marker) ``--runs``
times, each run a fresh pytest process, and prints failures per test and the total.

    python benchmarks/steady_tests.py [--runs 10] [--busy 1] [--also NODEID ...] [-k EXPR]
        [--commit REV] [--logs DIR]

``--commit REV`` runs the tests of a committed tree (``git archive REV``, its ``src`` first on
``PYTHONPATH``) instead of the working tree, so that edits others make meanwhile in a shared
checkout do not count as failures. The whole output of each failing run is kept under
``--logs``. Exit status 0 when no run failed, 1 otherwise. ``make steady-tests`` runs it with the
defaults.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

ALSO = [
    # Records two real runs and flags the slower; the file is not this check's to mark.
    "tests/test_store.py::test_duckdb_round_trip_and_flag",
]
"""Timing-touching tests in files that do not carry the ``timing`` marker."""

BUSY_LOOP = "while True:\n    pass\n"


def snapshot(rev: str, into: Path) -> Path:
    """The tree of commit ``rev`` extracted under ``into`` (``git archive``)."""
    into.mkdir(parents=True, exist_ok=True)
    tar = subprocess.run(
        ["git", "archive", "--format=tar", rev], cwd=ROOT, capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=tar, check=True)
    return into


def collect(root: Path, env: dict[str, str], k: str | None) -> list[str]:
    """Node ids of the tests marked ``timing``."""
    cmd = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "timing"]
    if k:
        cmd += ["-k", k]
    out = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, check=False)
    ids = [ln for ln in out.stdout.splitlines() if "::" in ln and not ln.startswith(" ")]
    if not ids:
        sys.exit(f"no test marked 'timing' collected:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    return ids


def run_once(
    root: Path, env: dict[str, str], ids: list[str], xml: Path, timeout: float
) -> tuple[dict[str, str], float, str]:
    """(node id -> outcome, wall seconds, output) of one pytest run of ``ids``."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}"]
    t0 = time.perf_counter()
    try:
        r = subprocess.run(
            [*cmd, *ids],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        output = r.stdout + r.stderr
    except subprocess.TimeoutExpired:
        return dict.fromkeys(ids, "timeout"), time.perf_counter() - t0, "timed out"
    wall = time.perf_counter() - t0
    outcome: dict[str, str] = {}
    if xml.is_file():
        for case in ET.parse(xml).getroot().iter("testcase"):
            cls, name = case.get("classname", ""), case.get("name", "")
            node = cls.replace(".", "/") + ".py::" + name
            tags = {c.tag for c in case}
            if tags & {"failure", "error"}:
                outcome[node] = "failed"
            elif "skipped" in tags:
                outcome[node] = "skipped"
            else:
                outcome[node] = "passed"
    return outcome, wall, output


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--busy", type=int, default=1, help="busy-loop processes (cores kept busy)")
    ap.add_argument("--also", nargs="*", default=ALSO, help="more node ids to run")
    ap.add_argument("-k", default=None, help="pytest -k expression on the marked tests")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    ap.add_argument("--commit", default=None, help="run the tests of this commit, not the tree")
    ap.add_argument("--logs", type=Path, default=None, help="where failing runs' output goes")
    a = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="steady_tests_"))
    logs = a.logs or work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    root, env = ROOT, dict(os.environ)
    if a.commit:
        root = snapshot(a.commit, work / "tree")
        env["PYTHONPATH"] = os.pathsep.join([str(root / "src"), env.get("PYTHONPATH", "")])
    ids = collect(root, env, a.k) + list(a.also)
    where = f"commit {a.commit}" if a.commit else "the working tree"
    print(f"{len(ids)} tests x {a.runs} runs, {a.busy} busy core(s), {os.cpu_count()} CPUs")
    print(f"tests of {where}; failing runs' output under {logs}")
    busy = [
        subprocess.Popen([sys.executable, "-c", BUSY_LOOP], stdout=subprocess.DEVNULL)
        for _ in range(a.busy)
    ]
    fails: Counter[str] = Counter()
    skips: Counter[str] = Counter()
    seen: Counter[str] = Counter()
    bad_runs = 0
    try:
        for i in range(a.runs):
            load = os.getloadavg()[0]
            xml = work / f"run{i}.xml"
            outcome, wall, output = run_once(root, env, ids, xml, a.timeout)
            failed = sorted(n for n, o in outcome.items() if o in ("failed", "timeout"))
            for n, o in outcome.items():
                seen[n] += 1
                fails[n] += o in ("failed", "timeout")
                skips[n] += o == "skipped"
            bad_runs += bool(failed) or not outcome
            print(
                f"run {i + 1}/{a.runs}: {len(outcome)} tests, {len(failed)} failed, "
                f"{wall:.0f} s, load {load:.1f} at start",
                flush=True,
            )
            for n in failed:
                print(f"  FAILED {n}")
            if failed or not outcome:
                log = logs / f"run{i + 1}.log"
                log.write_text(output)
                print(f"  output: {log}")
    finally:
        for p in busy:
            p.kill()
            p.wait()
    print(f"\nfailures per test ({a.runs} runs):")
    for n in sorted(seen):
        extra = f" (skipped {skips[n]})" if skips[n] else ""
        print(f"  {fails[n]:>3}  {n}{extra}")
    total = sum(fails.values())
    print(f"total: {total} failures in {a.runs} runs of {len(seen)} tests; {bad_runs} runs failed")
    return 1 if total or bad_runs else 0


if __name__ == "__main__":
    sys.exit(main())
