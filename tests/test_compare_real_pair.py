"""compare's host and device figures on a real before/after pair, against the raw JSON: pytorch/
kineto's ResNet-50 samples recorded with DataLoader(num_workers=0) and (num_workers=4)
(``../corpus/kineto``, docs/test-data.md; skipped when absent).

The reference reads the trace files with the standard library: ProfilerStep windows, the union
of the DataLoader calls in each (the per-step data loading), and the union of the device work
inside the steps' span (device busy; idle the span less it), each figure divided once."""

from __future__ import annotations

import gzip
import json
import re
import statistics
from pathlib import Path
from typing import Any

import pytest

from helpers.golden import DEVICE_CATS, ns
from opscope.analysis.compare import compare

KINETO = Path("/work/corpus/kineto")
BEFORE = KINETO / "d3fb4076_samples_resnet50_num_workers_0_worker0.pt.trace.json.gz"
AFTER = KINETO / "29dba67d_samples_resnet50_num_workers_4_worker0.pt.trace.json.gz"
HOST_CATS = {"cpu_op", "user_annotation", "python_function", "operator"}


def _union(iv: list[tuple[int, int]], w0: int, w1: int) -> int:
    clipped = sorted((max(a, w0), min(b, w1)) for a, b in iv if min(b, w1) > max(a, w0))
    total, cur_s, cur_e = 0, None, None
    for a, b in clipped:
        if cur_e is None or a > cur_e:
            if cur_e is not None and cur_s is not None:
                total += cur_e - cur_s
            cur_s, cur_e = a, b
        else:
            cur_e = max(cur_e, b)
    if cur_e is not None and cur_s is not None:
        total += cur_e - cur_s
    return total


def _reference(path: Path) -> dict[str, Any]:
    with gzip.open(path) as f:
        data = json.load(f)
    xs = [e for e in data["traceEvents"] if e.get("ph") == "X" and "ts" in e]
    windows: dict[int, tuple[int, int]] = {}
    for e in xs:
        m = re.fullmatch(r"ProfilerStep#(\d+)", e["name"])
        if m and e.get("cat") != "gpu_user_annotation" and int(m.group(1)) not in windows:
            windows[int(m.group(1))] = (ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]))
    span = (ns(e["ts"]), ns(e["ts"]) + ns(e.get("dur", 0)))
    loader = [
        (ns(e["ts"]), ns(e["ts"]) + ns(e.get("dur", 0)))
        for e in xs
        if re.search(r"DataLoader|dataloader", e["name"])
        and str(e.get("cat", "")).lower() in HOST_CATS
    ]
    device = [
        (ns(e["ts"]), ns(e["ts"]) + ns(e.get("dur", 0)))
        for e in xs
        if str(e.get("cat", "")).lower() in DEVICE_CATS
    ]
    lo = min(w[0] for w in windows.values())
    hi = max(w[1] for w in windows.values())
    del span
    busy = _union(device, lo, hi)
    return {
        "loading": [_union(loader, w0, w1) for w0, w1 in windows.values()],
        "busy": busy,
        "idle": hi - lo - busy,
    }


def test_data_loading_and_device_time_equal_the_raw_json() -> None:
    if not (BEFORE.exists() and AFTER.exists()):
        pytest.skip(f"kineto sample traces not found under {KINETO}")
    ref = [_reference(BEFORE), _reference(AFTER)]
    c = compare(BEFORE, AFTER)
    rows = {r["metric"]: r for r in c.summary.to_dicts()}
    loading = rows["data loading (host, median of the profiled steps)"]
    assert loading["before"] == statistics.median(ref[0]["loading"]) / 1000
    assert loading["after"] == statistics.median(ref[1]["loading"]) / 1000
    assert loading["verdict"] == "gain"  # 44 ms -> 1.4 ms a step: the change the user made
    for i, side in enumerate(c.sides.iter_rows(named=True)):
        assert side["device_busy_us"] == ref[i]["busy"] / 1000, i
        assert side["device_idle_us"] == ref[i]["idle"] / 1000, i
