"""Time ``advise()`` (every rule, the performance model included) on a large trace.

Generates a realistic Kineto trace with ``benchmarks/gen_trace.py`` until it holds about
``--events`` events (default 1M) unless ``--trace`` is given, loads it once (not timed), then
times ``advise(profile)`` in this process (wall and CPU seconds): the total and, with
``--per-rule``, each rule alone (each rule's time includes the shared work it triggers first:
the performance model, ancestors, locations), and prints one JSON line. ``--device NAME``
names the device's peaks (a generated trace has none).

    python benchmarks/advise_speed.py [--events 1000000] [--trace PATH] [--device H100]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--trace", type=Path)
    ap.add_argument("--device", default="H100")
    ap.add_argument("--per-rule", action="store_true", help="Also time each rule alone.")
    args = ap.parse_args()

    import opscope
    from opscope.advise import advise, rules

    path = args.trace
    tmp = None
    if path is None:
        from gen_trace import generate

        tmp = tempfile.TemporaryDirectory()
        path = Path(tmp.name) / "trace.json"
        # ~385 bytes of JSON per event in gen_trace output (measured: 24 MB, 62k events)
        generate(path, mb=args.events * 385 / 1e6)
    t0 = time.perf_counter()
    profile = opscope.load(path, cache=False)
    load_s = time.perf_counter() - t0
    results = {"target_name": args.device} if args.device else {}
    t0, c0 = time.perf_counter(), time.process_time()
    found = advise(profile, results)
    total_s = time.perf_counter() - t0
    cpu_s = time.process_time() - c0  # steadier than wall time on a shared machine
    out: dict[str, object] = {
        "events": profile.events.height,
        "load_s": round(load_s, 2),
        "advise_s": round(total_s, 2),
        "advise_cpu_s": round(cpu_s, 2),
        "findings": len(found),
        "errors": dict(found.errors),
        "top": [(f.rule, f.saving_us, f.saving_method) for f in list(found)[:5]],
    }
    if args.per_rule:
        per: dict[str, float] = {}
        for rid in rules():
            from opscope.advise import _common

            _common._MEMO.clear()  # each rule pays for the shared work it needs
            t0 = time.perf_counter()
            advise(profile, results, only=[rid])
            per[rid] = round(time.perf_counter() - t0, 2)
        out["per_rule_s"] = per
    print(json.dumps(out))
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
