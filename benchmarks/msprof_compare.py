"""Compare opscope's Ascend cluster figures with msprof-analyze's cluster output on one folder.

    python benchmarks/msprof_compare.py RUN_DIR [--msprof /path/to/msprof-analyze]

``RUN_DIR`` holds the ranks' ``*_ascend_pt`` folders. msprof-analyze is never a dependency of
opscope or its tests: install it in a separate venv (``python -m venv /work/msprof-venv &&
/work/msprof-venv/bin/pip install msprof-analyze``) and pass its executable with ``--msprof``
to run ``msprof-analyze cluster -d RUN_DIR -m all`` when ``RUN_DIR/cluster_analysis_output``
is absent. Prints, per rank, msprof-analyze's and opscope's Computing, Communication,
Communication(Not Overlapped), Free (cluster_step_trace_time.csv) and the Elapse / Wait sums of
cluster_communication.json, with the largest difference; then opscope's slow ranks, slow stages
and slow links, and msprof-analyze's per-rank bandwidth per transport.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

_STEP_COLS = (
    ("Computing", "computing_us"),
    ("Communication", "communication_us"),
    ("Communication(Not Overlapped)", "communication_not_overlapped_us"),
    ("Free", "free_us"),
)


def _msprof_steps(out: Path) -> dict[int, dict[str, float]]:
    per: dict[int, dict[str, float]] = {}
    with (out / "cluster_step_trace_time.csv").open() as f:
        for row in csv.DictReader(f):
            if row.get("Type") != "rank":
                continue
            r = per.setdefault(int(row["Index"]), {})
            for col, _ in _STEP_COLS:
                r[col] = r.get(col, 0.0) + float(row[col])
    return per


def _msprof_comm(
    out: Path,
) -> tuple[dict[int, dict[str, float]], dict[int, dict[str, list[float]]]]:
    """Per rank: Σ Elapse / Wait (µs) and per transport [bytes MB, time ms] over all ops."""
    times: dict[int, dict[str, float]] = {}
    bw: dict[int, dict[str, list[float]]] = {}
    data: dict[str, Any] = json.loads((out / "cluster_communication.json").read_text())
    for steps in data.values():
        for ops in steps.values():
            for op, ranks in ops.items():
                # Summary entries ("Total Op Info@<group>") repeat the ops' sums.
                if op.partition("@")[0] == "Total Op Info" or not isinstance(ranks, dict):
                    continue
                for rank, info in ranks.items():
                    t = info.get("Communication Time Info", {})
                    r = times.setdefault(int(rank), {"Elapse": 0.0, "Wait": 0.0})
                    r["Elapse"] += float(t.get("Elapse Time(ms)", 0)) * 1000
                    r["Wait"] += float(t.get("Wait Time(ms)", 0)) * 1000
                    for tr, b in (info.get("Communication Bandwidth Info") or {}).items():
                        acc = bw.setdefault(int(rank), {}).setdefault(tr, [0.0, 0.0])
                        acc[0] += float(b.get("Transit Size(MB)", 0))
                        acc[1] += float(b.get("Transit Time(ms)", 0))
    return times, bw


def _msprof_matrix(out: Path) -> dict[tuple[int, int, str], float]:
    """Bytes per (src, dst, transport) from cluster_communication_matrix.json: per group and
    step the ``<op>-total`` entries (each the sum of that op type's calls) when it has them,
    else its per-op entries (older exports; "Total Op Info" and top/middle/bottom left out)."""
    links: dict[tuple[int, int, str], float] = {}
    data: dict[str, Any] = json.loads((out / "cluster_communication_matrix.json").read_text())
    summary = re.compile(r"-(top\d*|middle\d*|bottom\d*)$|^Total Op Info$", re.IGNORECASE)
    for steps in data.values():
        for ops in steps.values():
            names = [op.partition("@")[0] for op in ops]
            has_total = any(n.endswith("-total") for n in names)
            for op, pairs in ops.items():
                name = op.partition("@")[0]
                keep = name.endswith("-total") if has_total else not summary.search(name)
                if not keep or not isinstance(pairs, dict):
                    continue
                for pair, v in pairs.items():
                    src, _, dst = pair.partition("-")
                    if src == dst:
                        continue
                    k = (int(src), int(dst), str(v.get("Transport Type")))
                    links[k] = links.get(k, 0.0) + float(v.get("Transit Size(MB)", 0)) * 1e6
    return links


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--msprof", help="msprof-analyze executable (a separate venv)")
    a = ap.parse_args(argv)
    out = a.run_dir / "cluster_analysis_output"
    if not out.is_dir():
        if not a.msprof:
            print(f"{out} is absent: pass --msprof to run msprof-analyze", file=sys.stderr)
            return 2
        subprocess.run([a.msprof, "cluster", "-d", str(a.run_dir), "-m", "all"], check=True)

    from opscope.cluster import run_cluster

    res = run_cluster(a.run_dir, workers=0, cache=False)
    js = res.to_json()
    ours = {r["rank"]: r for r in js["msprof_ranks"]}
    steps = _msprof_steps(out)
    comm, bw = _msprof_comm(out)
    worst = 0.0
    print("rank  figure                            msprof-analyze (us)     opscope (us)      diff")
    for rank in sorted(set(steps) | set(ours)):
        o = ours.get(rank, {})
        pairs = [(c, steps.get(rank, {}).get(c), o.get(k)) for c, k in _STEP_COLS]
        pairs += [
            (
                "Elapse (communication.json)",
                comm.get(rank, {}).get("Elapse"),
                o.get("hccl_elapse_us"),
            ),
            ("Wait (communication.json)", comm.get(rank, {}).get("Wait"), o.get("hccl_wait_us")),
        ]
        for name, theirs, mine in pairs:
            d = None if theirs is None or mine is None else mine - theirs
            if d is not None:
                worst = max(worst, abs(d))
            print(f"{rank:>4}  {name:<32} {_f(theirs):>20} {_f(mine):>16} {_f(d):>9}")
    print(f"largest difference: {worst:.3f} us")
    for c, g in js["rank_gaps"].items():
        print(f"opscope {c} gap: {g['gap']:,.3f} us (rank {g['max_rank']} - rank {g['min_rank']})")
    print(f"opscope slow ranks: {js['slow_ranks']}  slow stages: {js['slow_stages']}")
    slow_links = [(s["src_rank"], s["dst_rank"], s["transport"]) for s in js["slow_links"]]
    print(f"opscope slow links: {slow_links}")
    theirs_m = _msprof_matrix(out)
    ours_m = {(m["src_rank"], m["dst_rank"], m["transport"]): m["size_bytes"] for m in js["matrix"]}
    print("matrix link (src-dst transport)   msprof-analyze bytes     opscope bytes")
    for k in sorted(set(theirs_m) | set(ours_m)):
        t, o = theirs_m.get(k), ours_m.get(k)
        print(f"{k[0]}-{k[1]} {k[2]:<28} {_f(t):>22} {_f(o):>17}")
    for rank, trs in sorted(bw.items()):
        figs = ", ".join(
            f"{tr} {mb / ms:.3f} GB/s" for tr, (mb, ms) in sorted(trs.items()) if ms > 0
        )
        print(f"msprof-analyze rank {rank} bandwidth: {figs}")
    return 0


def _f(v: float | None) -> str:
    return "-" if v is None else f"{v:,.3f}"


if __name__ == "__main__":
    sys.exit(main())
