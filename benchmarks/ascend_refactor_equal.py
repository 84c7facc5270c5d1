"""Are two opscope checkouts' readers equal on the real traces, table by table?

    git archive OLD src | tar -x -C /tmp/old
    python benchmarks/ascend_refactor_equal.py --baseline-src /tmp/old/src [--after-src DIR]
        [--kineto] [--out DIR]

Each side runs in a fresh process with its own ``src`` first on ``PYTHONPATH`` (``--after-src``,
default this checkout's ``src``, for the new side; archive a commit there too when others'
uncommitted work in the tree must stay out of the comparison), reads every Ascend rank under
:data:`ASCEND_ROOTS` (with ``--kineto`` also every Kineto trace under :data:`KINETO_ROOTS`)
without the cache, and writes every table to parquet and the meta to JSON. Then one line per
source: ``EQUAL``, or ``DIFFER`` with the tables that differ (row counts, or the columns that
differ when the counts agree). Exit status 1 when any source differs. Absent folders are skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import polars as pl

ASCEND_ROOTS = ["/work/ascend_data", "../shared/traces/ascend", "/work/shared/traces/ascend"]
KINETO_ROOTS = ["/work/corpus", "/work/shared/traces/gpu", "/work/shared/traces/multi_rank"]
HERE = Path(__file__).resolve().parent.parent


def _sources(kineto: bool) -> list[tuple[str, Path]]:
    from opscope.ingest import ascend

    out: list[tuple[str, Path]] = []
    seen: set[Path] = set()
    for root in map(Path, ASCEND_ROOTS):
        for d in sorted(root.rglob("*")) if root.is_dir() else []:
            real = d.resolve()
            if real in seen or not d.is_dir() or d.name == ascend.OUTPUT_DIR:
                continue
            if ascend.is_ascend_dir(d) and not ascend.is_ascend_dir(d.parent):
                seen.add(real)
                out.append(("ascend", d))
    if kineto:
        for root in map(Path, KINETO_ROOTS):
            for f in sorted(root.rglob("*.json*")) if root.is_dir() else []:
                if (
                    f.is_file()
                    and f.name.endswith((".json", ".json.gz"))
                    and ".opscope" not in str(f)
                ):
                    out.append(("kineto", f))
    return out


def _key(path: Path) -> str:
    return str(path.resolve()).strip("/").replace("/", "__")


def dump(out: Path, kineto: bool) -> None:
    """Write every table of every source (this process's opscope) under ``out``."""
    from opscope.ingest.ascend import read_ascend
    from opscope.ingest.kineto import read_kineto
    from opscope.model import schema

    out.mkdir(parents=True, exist_ok=True)
    for fmt, path in _sources(kineto):
        try:
            prof = (
                read_ascend(path, cache=False)
                if fmt == "ascend"
                else read_kineto(path, cache=False)
            )
        except Exception as e:
            print(f"skip {path}: {type(e).__name__}: {str(e)[:80]}", file=sys.stderr)
            continue
        d = out / _key(path)
        d.mkdir(exist_ok=True)
        for name in schema.TABLES:
            getattr(prof, name).write_parquet(d / f"{name}.parquet")
        (d / "meta.json").write_text(json.dumps(prof.meta, sort_keys=True, default=str))


def compare(before: Path, after: Path) -> int:
    """Print one line per source; return how many differ."""
    bad = 0
    for da in sorted(before.iterdir()):
        db = after / da.name
        diffs = []
        for f in sorted(da.iterdir()):
            g = db / f.name
            if not g.exists():
                diffs.append(f"{f.name} missing")
            elif f.suffix == ".json":
                if json.loads(f.read_text()) != json.loads(g.read_text()):
                    diffs.append("meta")
            else:
                x, y = pl.read_parquet(f), pl.read_parquet(g)
                if x.schema != y.schema:
                    diffs.append(f"{f.stem}: schema")
                elif x.height != y.height:
                    diffs.append(f"{f.stem}: {x.height} -> {y.height} rows")
                elif not x.equals(y):
                    cols = [c for c in x.columns if not x[c].equals(y[c])]
                    diffs.append(f"{f.stem}: columns {cols}")
        print(("DIFFER " if diffs else "EQUAL  ") + da.name, "; ".join(diffs))
        bad += bool(diffs)
    return bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline-src", required=True, type=Path)
    ap.add_argument("--after-src", type=Path, default=HERE / "src")
    ap.add_argument("--kineto", action="store_true")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--dump", type=Path, help=argparse.SUPPRESS)  # child mode
    a = ap.parse_args()
    if a.dump:
        dump(a.dump, a.kineto)
        return 0
    out = a.out or Path(tempfile.mkdtemp(prefix="reader_equal_"))
    for side, src in (("before", a.baseline_src.resolve()), ("after", a.after_src.resolve())):
        env = {**os.environ, "PYTHONPATH": str(src)}
        cmd = [sys.executable, __file__, "--baseline-src", str(src), "--dump", str(out / side)]
        subprocess.run(cmd + (["--kineto"] if a.kineto else []), env=env, check=True)
    return 1 if compare(out / "before", out / "after") else 0


if __name__ == "__main__":
    sys.exit(main())
