"""Compare opscope's Ascend cluster figures with msprof-analyze's cluster output on one folder.

    python benchmarks/msprof_compare.py RUN_DIR [--msprof /path/to/msprof-analyze]

``RUN_DIR`` holds the ranks' ``*_ascend_pt`` folders. msprof-analyze is never a dependency of
opscope or its tests: install it in a separate venv (``python -m venv /work/msprof-venv &&
/work/msprof-venv/bin/pip install msprof-analyze``) and pass its executable with ``--msprof``
to run ``msprof-analyze cluster -d RUN_DIR -m all --export_type text`` when
``RUN_DIR/cluster_analysis_output`` is absent. Prints, per rank, msprof-analyze's and opscope's
Computing, Communication, Communication(Not Overlapped), Free and the Elapse / Wait sums of the
ranks' communication, with the largest difference; then opscope's slow ranks, slow stages and
slow links; the matrix link by link (a destination that was not profiled marked: msprof-analyze
drops those links, opscope keeps them) with the bytes between profiled ranks on both sides; and
msprof-analyze's per-rank bandwidth per transport.

    python benchmarks/msprof_compare.py RUN_DIR --packet --msprof /path/to/msprof-analyze

compares the packet analysis instead (rule ``ascend-comm-packet``): for each rank folder,
msprof-analyze's advisor (``advisor all -d RANK -l en``: its packet analyzer reads one rank)
gives the share of SDMA / RDMA operators under 16 / 1 MB and their transit time when the share
is over 20% (it prints nothing below); opscope's figures per rank come from the same files.
msprof-analyze reads ``communication.json`` for a text export and ``analysis.db`` when the
folder holds an ``ascend_pytorch_profiler*.db``; for a text rank that also has
``analysis.db`` (msinsight's st/level2) the database path is run as well, on a copy of the
rank in a temporary folder with an empty ``ascend_pytorch_profiler_<rank>.db`` beside it
(the file only selects the path; its packet analyzer reads ``analysis.db``). The text path
counts communication.json's summary entries (``Total Op Info``, one per p2p / collective
kind) as operators, the database path does not (nor does opscope).

msprof-analyze writes one of two layouts: for text exports ``cluster_step_trace_time.csv``,
``cluster_communication.json`` and ``cluster_communication_matrix.json``; for ranks with
``analysis.db`` (database exports, and msinsight's st/level2) ``cluster_analysis.db``
(``ClusterStepTraceTime``), ``CommunicationTimeSum/cluster_communication_time.csv`` /
``_bandwidth.csv`` and ``CommMatrixSum/cluster_communication_matrix.csv``. Both are read.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

_STEP_COLS = (
    ("Computing", "computing_us"),
    ("Communication", "communication_us"),
    ("Communication(Not Overlapped)", "communication_not_overlapped_us"),
    ("Free", "free_us"),
)


_DB_STEP_COLS = {
    "Computing": "computing",
    "Communication": "communication",
    "Communication(Not Overlapped)": "communication_not_overlapped",
    "Free": "free",
}


def _msprof_steps(out: Path) -> dict[int, dict[str, float]]:
    per: dict[int, dict[str, float]] = {}
    text = out / "cluster_step_trace_time.csv"
    if text.is_file():
        with text.open() as f:
            for row in csv.DictReader(f):
                if row.get("Type") != "rank":
                    continue
                r = per.setdefault(int(row["Index"]), {})
                for col, _ in _STEP_COLS:
                    r[col] = r.get(col, 0.0) + float(row[col])
        return per
    db = out / "cluster_analysis.db"
    if not db.is_file():
        return per
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        cols = ", ".join(_DB_STEP_COLS.values())
        for row in con.execute(
            f"SELECT \"index\", {cols} FROM ClusterStepTraceTime WHERE type = 'rank'"
        ):
            r = per.setdefault(int(row[0]), {})
            for col, v in zip(_DB_STEP_COLS, row[1:], strict=True):
                r[col] = r.get(col, 0.0) + float(v)
    finally:
        con.close()
    return per


def _msprof_comm(
    out: Path,
) -> tuple[dict[int, dict[str, float]], dict[int, dict[str, list[float]]]]:
    """Per rank: Σ Elapse / Wait (µs) and per transport [bytes MB, time ms] over all ops."""
    times: dict[int, dict[str, float]] = {}
    bw: dict[int, dict[str, list[float]]] = {}
    sums = out / "CommunicationTimeSum"
    if (sums / "cluster_communication_time.csv").is_file():
        with (sums / "cluster_communication_time.csv").open() as f:
            for row in csv.DictReader(f):
                if row["hccl_op_name"] == "Total Op Info":
                    continue
                r = times.setdefault(int(row["rank_id"]), {"Elapse": 0.0, "Wait": 0.0})
                r["Elapse"] += float(row["elapsed_time"]) * 1000
                r["Wait"] += float(row["wait_time"]) * 1000
        seen: set[tuple[str, ...]] = set()
        with (sums / "cluster_communication_bandwidth.csv").open() as f:
            for row in csv.DictReader(f):
                # One row per packet-size bucket; the op's transport figures repeat on each.
                key = (row["step"], row["rank_id"], row["hccl_op_name"], row["band_type"])
                if row["hccl_op_name"] == "Total Op Info" or key in seen:
                    continue
                seen.add(key)
                acc = bw.setdefault(int(row["rank_id"]), {}).setdefault(row["band_type"], [0, 0])
                acc[0] += float(row["transit_size"])
                acc[1] += float(row["transit_time"])
        return times, bw
    if not (out / "cluster_communication.json").is_file():
        return times, bw
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
    summary = re.compile(r"-(top\d*|middle\d*|bottom\d*)$|^Total Op Info$", re.IGNORECASE)
    flat = out / "CommMatrixSum" / "cluster_communication_matrix.csv"
    if flat.is_file():
        with flat.open() as f:
            rows = list(csv.DictReader(f))
        totals = {
            (r["step"], r["group_name"]) for r in rows if r["hccl_op_name"].endswith("-total")
        }
        for r in rows:
            name = r["hccl_op_name"]
            has_total = (r["step"], r["group_name"]) in totals
            keep = name.endswith("-total") if has_total else not summary.search(name)
            if not keep or r["src_rank"] == r["dst_rank"]:
                continue
            k = (int(r["src_rank"]), int(r["dst_rank"]), r["transport_type"])
            links[k] = links.get(k, 0.0) + float(r["transit_size"]) * 1e6
        return links
    if not (out / "cluster_communication_matrix.json").is_file():
        return links
    data: dict[str, Any] = json.loads((out / "cluster_communication_matrix.json").read_text())
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


_PACKET = re.compile(
    r"In the (SDMA|RDMA) communication, ([\d.]+)% of the communication data volume is less "
    r"than [\d.]+ MB, and the total time is ([\d.]+) ms"
)


def _msprof_packet(msprof: str, rank_dir: Path, db: bool) -> dict[str, tuple[float, float]]:
    """msprof-analyze advisor's packet figures on one rank: transport -> (small share, small
    transit ms); a transport it does not report (share not over 20%) is absent."""
    with tempfile.TemporaryDirectory() as tmp:
        src = rank_dir
        if db:
            src = Path(tmp) / rank_dir.name
            shutil.copytree(rank_dir, src)
            out = src / "ASCEND_PROFILER_OUTPUT"
            m = re.search(r"(\d+)", rank_dir.name)
            (out / f"ascend_pytorch_profiler_{m.group(1) if m else 0}.db").touch()
        cmd = [msprof, "advisor", "all", "-d", str(src), "-o", str(Path(tmp) / "o"), "-l", "en"]
        # cwd: the advisor leaves operator_tuning_file_<time>.cfg in its working folder
        log = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=tmp).stdout
    return {tr: (float(pct) / 100, float(ms)) for tr, pct, ms in _PACKET.findall(log)}


def _summaries(path: Path, transport: str) -> int:
    """communication.json's summary entries ("Total Op Info") with traffic on ``transport``."""
    if not path.is_file():
        return 0
    n = 0
    for kinds in json.loads(path.read_text()).values():
        for ops in kinds.values():
            info = ops.get("Total Op Info") or {}
            bw = (info.get("Communication Bandwidth Info") or {}).get(transport) or {}
            n += bool(bw.get("Transit Size(MB)"))
    return n


def _rank_dirs(run_dir: Path) -> list[Path]:
    if (run_dir / "ASCEND_PROFILER_OUTPUT").is_dir():
        return [run_dir]
    return sorted(p for p in run_dir.iterdir() if (p / "ASCEND_PROFILER_OUTPUT").is_dir())


def packet(run_dir: Path, msprof: str) -> int:
    """Print msprof-analyze's and opscope's packet figures per rank and transport."""
    import polars as pl

    import opscope
    from opscope.advise import advise
    from opscope.advise.rules.ascend_comm_packet import MIN_BYTES, MIN_SMALL_SHARE, transit_sizes
    from opscope.ingest.ascend import rank_of

    prof = opscope.load(run_dir)
    tr = transit_sizes(prof)
    found = advise(prof, {"target": "ascend"}).by_rule("ascend-comm-packet")
    print(f"{run_dir}: opscope findings: {[f.title for f in found] or 'none'}")
    print(
        "rank  transport  msprof text (share, ms)   msprof db (share, ms)    "
        "opscope (small/n = share, ms)"
    )
    worst = 0.0
    differ: list[str] = []
    for rd in _rank_dirs(run_dir):
        out = rd / "ASCEND_PROFILER_OUTPUT"
        rank = rank_of(out) or 0
        native_db = any(out.glob("ascend_pytorch_profiler*.db"))
        runs: dict[str, dict[str, tuple[float, float]] | None] = {
            "text": None if native_db else _msprof_packet(msprof, rd, db=False),
            "db": _msprof_packet(msprof, rd, db=True)
            if native_db or (out / "analysis.db").is_file()
            else None,
        }
        for transport, limit in MIN_BYTES.items():
            g = tr.filter((pl.col("rank") == rank) & (pl.col("transport") == transport))
            small = g.filter(pl.col("bytes") < limit)
            ms = float(small.get_column("time_ns").fill_null(0).sum()) / 1e6
            share = small.height / g.height if g.height else None
            mine = "-" if share is None else f"{small.height}/{g.height} = {share:.4f}, {ms:.4f}"
            fires = share is not None and small.height > 0 and share > MIN_SMALL_SHARE
            # the text path's count: the summary entries with traffic are more operators
            n_text = g.height + _summaries(out / "communication.json", transport)
            share_text = small.height / n_text if n_text else None
            cols = []
            for label, fig in runs.items():
                if fig is None:
                    cols.append("(not run)")
                    continue
                want = share_text if label == "text" else share
                if transport in fig:
                    s_, t_ = fig[transport]
                    cols.append(f"{s_:.4f}, {t_:.4f}")
                    worst = max(worst, abs(s_ - (want or 0)))
                else:
                    cols.append(f"<= {MIN_SMALL_SHARE:.0%} (silent)")
                    if want is not None and small.height and want > MIN_SMALL_SHARE:
                        worst = max(worst, want - MIN_SMALL_SHARE)
                if (transport in fig) != fires:
                    differ.append(f"rank {rank} {transport} ({label} path)")
            print(f"{rank:>4}  {transport:<9}  {cols[0]:<24} {cols[1]:<24} {mine}")
    print(
        "largest share difference (database path vs opscope's share; text path vs opscope's "
        f"small count over its operators plus communication.json's summary entries): {worst:.4f}"
    )
    print(f"where msprof-analyze and the rule decide differently: {differ or 'nowhere'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--msprof", help="msprof-analyze executable (a separate venv)")
    ap.add_argument("--packet", action="store_true", help="compare the packet analysis")
    a = ap.parse_args(argv)
    if a.packet:
        if not a.msprof:
            print("--packet runs msprof-analyze's advisor: pass --msprof", file=sys.stderr)
            return 2
        return packet(a.run_dir, a.msprof)
    out = a.run_dir / "cluster_analysis_output"
    if not out.is_dir():
        if not a.msprof:
            print(f"{out} is absent: pass --msprof to run msprof-analyze", file=sys.stderr)
            return 2
        cmd = [a.msprof, "cluster", "-d", str(a.run_dir), "-m", "all", "--export_type", "text"]
        subprocess.run(cmd, check=True)

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
    off = {(m["src_rank"], m["dst_rank"]) for m in js["matrix"] if not m["dst_profiled"]}
    print("matrix link (src-dst transport)              msprof-analyze bytes     opscope bytes")
    for k in sorted(set(theirs_m) | set(ours_m)):
        t, o = theirs_m.get(k), ours_m.get(k)
        mark = " (not profiled)" if (k[0], k[1]) in off else ""
        dst = "?" if k[1] == -1 else k[1]  # cluster_ascend.UNKNOWN_RANK
        print(f"{f'{k[0]}-{dst}{mark}':<20} {k[2]:<22} {_f(t):>22} {_f(o):>17}")
    ours_on = sum(v for k, v in ours_m.items() if (k[0], k[1]) not in off)
    ours_off = sum(v for k, v in ours_m.items() if (k[0], k[1]) in off)
    print(
        f"matrix bytes between profiled ranks: msprof-analyze {_f(sum(theirs_m.values()))}, "
        f"opscope {_f(ours_on)}; opscope only, to ranks not profiled: {_f(ours_off)}"
    )
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
