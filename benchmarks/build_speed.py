"""Time the Kineto table build and linking (``kineto._build_profile``) apart from the decode.

Dev-only harness, three subcommands:

- ``capture TRACE DIR``: decode TRACE once with the current reader and save what
  ``_build_profile`` receives (raw frame and exact times as Parquet, counters / header / oddities
  as JSON) into DIR; the build itself is skipped.
- ``time DIR [--save OUT] [--cprofile N]``: in this (fresh) process load DIR, run
  ``_build_profile`` with a timer around each linking stage and print one JSON line: stage wall
  times, total wall and CPU seconds, and peak RSS both as the process peak and as the rise over
  the loaded inputs (the kernel's peak counter is reset after loading, where Linux allows it).
  ``--save`` writes the Profile (``Profile.save``); ``--cprofile N`` prints the top N functions by
  CPU time.
- ``check DIR OLD``: build from DIR and compare the Profile table by table (row order included)
  with the one saved in OLD.

    python benchmarks/build_speed.py capture /tmp/opscope-bench/trace_100mb.json /tmp/b/100
    python benchmarks/build_speed.py time /tmp/b/100 --save /tmp/b/100.base
    python benchmarks/build_speed.py check /tmp/b/100 /tmp/b/100.base
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import polars as pl

STAGES = (
    ("kineto", "_with_times_and_tracks"),
    ("kineto", "_events_table"),
    ("kineto", "_raw_flows"),
    ("kineto", "_memory_rows"),
    ("kineto", "_thread_names"),
    ("link", "nest"),
    ("link", "nest_indexed"),
    ("link", "resolve_flows"),
    ("link", "link_launches"),
    ("link", "mark_backward"),
    ("link", "link_fwd_bwd"),
    ("link", "step_numbers"),
    ("link", "assign_steps"),
    ("link", "build_stacks"),
    ("link", "link_memory"),
    ("link", "link_events"),
    ("kineto", "_threads"),
    ("kineto", "_counters"),
    ("kineto", "_devices"),
)


def capture(trace: Path, out: Path) -> None:
    from opscope.ingest import gz, kineto

    got: dict[str, Any] = {}

    def grab(held: list[pl.DataFrame], counters: Any, header: Any, path: Any, odd: Any, **kw: Any):
        got.update(raw=held.pop(), counters=counters, header=header, oddities=odd, **kw)
        raise _Captured

    kineto._build_profile = grab  # type: ignore[assignment]
    with contextlib.suppress(_Captured):
        kineto.parse_bytes(gz.read_bytes(trace), trace)
    out.mkdir(parents=True, exist_ok=True)
    got["raw"].write_parquet(out / "raw.parquet")
    if got.get("exact") is not None:
        pl.DataFrame(list(got["exact"])).write_parquet(out / "exact.parquet")
    counters = [msgspec.structs.asdict(c) for c in got["counters"]]
    for c in counters:  # Raw args: keep their JSON text
        c["args"] = bytes(c["args"]).decode() if c["args"] is not None else None
    meta = {
        "path": str(trace),
        "rank": got.get("rank"),
        "header": got["header"],
        "oddities": got["oddities"],
        "counters": counters,
    }
    (out / "inputs.json").write_text(json.dumps(meta))


class _Captured(Exception):
    pass


def _load_inputs(d: Path) -> dict[str, Any]:
    from opscope.ingest import jsonscan

    meta = json.loads((d / "inputs.json").read_text())
    counters = []
    for c in meta["counters"]:
        args = c.pop("args")
        c["args"] = msgspec.Raw(args.encode()) if args is not None else None
        counters.append(jsonscan.CounterEvent(**c))
    exact = None
    if (d / "exact.parquet").exists():
        ex = pl.read_parquet(d / "exact.parquet")
        exact = (ex.get_column("ts_ns"), ex.get_column("dur_ns"))
    return {
        "raw": pl.read_parquet(d / "raw.parquet"),
        "counters": counters,
        "header": meta["header"],
        "path": Path(meta["path"]),
        "oddities": meta["oddities"],
        "rank": meta["rank"],
        "exact": exact,
    }


def _rss_peak_kb() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _rss_now_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _instrument(timings: dict[str, float]) -> None:
    """Wrap each stage so its wall time adds up in ``timings`` (nested stages are counted in
    their caller too: link_events holds the linking stages it calls)."""
    from opscope.ingest import kineto, link

    mods = {"link": link, "kineto": kineto}
    for mod_name, fn_name in STAGES:
        mod = mods[mod_name]
        fn = getattr(mod, fn_name, None)
        if fn is None:
            continue
        setattr(mod, fn_name, _timed(fn, fn_name, timings))


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _timed(fn: Callable[..., Any], name: str, timings: dict[str, float]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*a: Any, **kw: Any) -> Any:
        t, c = time.perf_counter(), _cpu()
        try:
            return fn(*a, **kw)
        finally:
            timings[name] = timings.get(name, 0.0) + time.perf_counter() - t
            timings[name + " cpu"] = timings.get(name + " cpu", 0.0) + _cpu() - c
            # the process peak so far: the stage where it jumps is the one that set the peak
            timings[name + " peak_gb"] = _rss_peak_kb() / 2**20

    return wrapper


def _build(inp: dict[str, Any]) -> Any:
    from opscope.ingest import kineto

    return kineto._build_profile(
        [inp.pop("raw")],
        inp["counters"],
        inp["header"],
        inp["path"],
        inp["oddities"],
        exact=inp["exact"],
        rank=inp["rank"],
    )


def time_build(d: Path, save: Path | None, cprofile: int) -> None:
    import opscope.ingest.kineto  # noqa: F401  (import cost kept out of the timing)

    inp = _load_inputs(d)
    n_raw = inp["raw"].height
    timings: dict[str, float] = {}
    _instrument(timings)
    base_kb = _rss_now_kb()
    reset = _reset_peak()
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    if cprofile:
        import cProfile
        import pstats

        prof = cProfile.Profile(time.process_time)
        prof.enable()
        p = _build(inp)
        prof.disable()
    else:
        p = _build(inp)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    peak_kb = _rss_peak_kb()
    # Stages called by _build_profile itself; the rest of its time is "other".
    top = [n for m, n in STAGES if m == "kineto"] + ["link_events", "link_memory"]
    timings["other"] = wall - sum(timings.get(k, 0.0) for k in top)
    cpu = r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
    timings["other cpu"] = cpu - sum(timings.get(k + " cpu", 0.0) for k in top)
    out = {
        "inputs": str(d),
        "raw_rows": n_raw,
        "events": p.events.height,
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "rss_inputs_gb": round(base_kb / 2**20, 3),
        "rss_peak_gb": round(peak_kb / 2**20, 3),
        "rss_rise_gb": round((peak_kb - base_kb) / 2**20, 3) if reset else None,
        "stages_s": {k: round(v, 3) for k, v in timings.items()},
    }
    print(json.dumps(out))
    if cprofile:
        pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(cprofile)
    if save is not None:
        p.save(save)


def check(d: Path, old: Path) -> None:
    from polars.testing import assert_frame_equal

    from opscope.model import Profile, schema

    new = _build(_load_inputs(d))
    ref = Profile.open(old)
    bad = []
    for name in schema.TABLES:
        try:
            assert_frame_equal(new.table(name), ref.table(name), check_exact=True)
        except AssertionError as e:
            bad.append(f"{name}: {str(e).splitlines()[0]}")
    if new.meta.get("oddities") != ref.meta.get("oddities"):
        bad.append(f"oddities: {new.meta.get('oddities')} != {ref.meta.get('oddities')}")
    print(json.dumps({"inputs": str(d), "equal": not bad, "diff": bad}))
    if bad:
        sys.exit(1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("capture")
    c.add_argument("trace", type=Path)
    c.add_argument("out", type=Path)
    t = sub.add_parser("time")
    t.add_argument("dir", type=Path)
    t.add_argument("--save", type=Path)
    t.add_argument("--cprofile", type=int, default=0)
    k = sub.add_parser("check")
    k.add_argument("dir", type=Path)
    k.add_argument("old", type=Path)
    a = ap.parse_args()
    if a.cmd == "capture":
        capture(a.trace, a.out)
    elif a.cmd == "time":
        time_build(a.dir, a.save, a.cprofile)
    else:
        check(a.dir, a.old)


if __name__ == "__main__":
    main()
