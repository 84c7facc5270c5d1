"""The byte scanner against the reference decoder on any traces you hold: table by table.

    python benchmarks/differential.py TRACE_OR_DIR [...] [--chunk N]

For every Kineto trace found (``*.json``, ``*.json.gz``), builds the whole Profile twice — with
the byte scanner (in chunks of ``--chunk`` events; default the reader's own) and with the
reference msgspec decoder (``OPSCOPE_SCANNER=reference``) — and prints, per trace, OK or the
tables that differ with the number of differing cells per column. A file neither path reads is
listed with the error both give. Exit status 1 when any trace differs.

This is how the chunk-buffer fault of fastscan was found on public traces (7 of 54 differed);
tests/test_scanner_differential.py runs the same comparison in CI on the shared traces.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import polars as pl

from opscope.errors import OpscopeError
from opscope.ingest import fastscan, kineto
from opscope.model import Profile, schema


def _traces(paths: list[str]) -> list[Path]:
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out += sorted(
                q
                for q in p.rglob("*.json*")
                if q.is_file()
                and q.name.endswith((".json", ".json.gz"))
                and not any(part.startswith(".") for part in q.relative_to(p).parts)
            )
        else:
            out.append(p)
    return out


def _load(path: Path, reference: bool) -> Profile:
    if reference:
        os.environ["OPSCOPE_SCANNER"] = "reference"
    else:
        os.environ.pop("OPSCOPE_SCANNER", None)
    return kineto.parse_kineto(path)


def _diff(a: pl.DataFrame, b: pl.DataFrame) -> str | None:
    if a.equals(b):
        return None
    if a.shape != b.shape or a.columns != b.columns:
        return f"shape {a.shape} vs {b.shape}"
    cells = {
        c: int(a[c].ne_missing(b[c]).sum())
        for c in a.columns
        if a[c].dtype == b[c].dtype and not a[c].dtype.is_nested()
    }
    typed = [c for c in a.columns if a[c].dtype != b[c].dtype]
    parts = [f"{c}: {n}" for c, n in cells.items() if n] + [f"{c}: dtype" for c in typed]
    return ", ".join(parts) or "nested values differ"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--chunk", type=int, default=None, help="scanner chunk size in events")
    args = ap.parse_args(argv)
    if not fastscan.available():
        print("the byte scanner is not available here (numba missing or switched off)")
        return 2
    if args.chunk:
        fastscan.CHUNK_EVENTS = args.chunk
    bad = n = 0
    for path in _traces(args.paths):
        t0 = time.perf_counter()
        try:
            fast = _load(path, False)
            ref = _load(path, True)
        except OpscopeError as e:
            print(f"SKIP {path.name}: {e}")
            continue
        n += 1
        diffs = {}
        for name in schema.TABLES:
            d = _diff(fast.table(name), ref.table(name))
            if d:
                diffs[name] = d
        if dict(fast.meta) != dict(ref.meta):
            diffs["meta"] = "differs"
        secs = time.perf_counter() - t0
        events = fast.events.height
        if diffs:
            bad += 1
            print(f"BAD  {path.name} ({events} events, {secs:.1f} s)")
            for name, d in diffs.items():
                print(f"       {name}: {d}")
        else:
            print(f"OK   {path.name} ({events} events, {secs:.1f} s)")
    print(f"{n - bad} of {n} traces equal on both paths, every table")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
