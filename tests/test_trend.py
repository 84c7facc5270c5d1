"""opscope trend: change points of real periodic CPU runs, one with a slowdown planted at a
known step, one steady; medians checked against metrics.jsonl parsed with the stdlib."""

from __future__ import annotations

import gzip
import json
import statistics
import sys
from pathlib import Path

import pytest

from opscope.cli.app import main
from opscope.record.api import RecordSettings
from opscope.record.launcher import record_callable
from opscope.trend import trend
from opscope.trend.changepoints import detect

sys.path.insert(0, str(Path(__file__).parent / "scripts"))
from trend_train import train

STEPS = 60
SLOW_FROM = 30
EVERY = 10
SETTINGS = RecordSettings(wait=1, warmup=1, active=3, every=EVERY)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def slow_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("trend") / "slow"
    record_callable(lambda: train(STEPS, SLOW_FROM, extra=30), out, SETTINGS)
    return out


MIN_CPU_SHARE = 0.6
"""Below this share of a core (process CPU time / wall time while recording) the machine is so
oversubscribed that wall-clock operator times drift from sample to sample for reasons outside the
run; the steady-run check on the per-sample operator series is then skipped (step time is still
checked)."""


def _record_steady(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float]:
    """A steady run, and the share of a core it got while recording."""
    import time

    out = tmp_path_factory.mktemp("trend") / "steady"
    w0, c0 = time.perf_counter(), time.process_time()
    record_callable(lambda: train(STEPS), out, SETTINGS)
    return out, (time.process_time() - c0) / (time.perf_counter() - w0)


STEADY_ATTEMPTS = 3
"""Steady runs the steady-run test may record. The 2-core VM's speed moves by 25-40% for a few
hundred ms at a time: 3 of 15 steady 60-step runs (1.5 ms steps) held such a shift, and 2 of 15
with 8 ms steps; that is a real shift of step time, which trend rightly reports. With three tries
a correct detector fails about once in 100-400 runs; one that flags steady runs fails every time."""


def _clean_walls(run: Path) -> dict[int, float]:
    """step -> wall µs of the steps the profiler did not touch."""
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x]
    prof = {r["step"] for r in rows if r["profiled"]}
    warm = {s - 1 for s in prof if s - 1 not in prof}  # the profiler's warm-up step
    after = {s + 1 for s in prof if s + 1 not in prof}  # stops the profiler, writes the trace
    skip = prof | warm | after
    return {r["step"]: r["wall_ns"] / 1000.0 for r in rows if r["step"] not in skip}


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_planted_slowdown_found_at_its_step(
    slow_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _cli(capsys, "trend", str(slow_run), "--json")
    assert code == 0
    j = json.loads(out)
    assert j["steps"] == STEPS
    # the planted slowdown; a speed-up while the process warms up may be found too (it is real)
    st = [c for c in j["change_points"] if c["metric"] == "step_time" and c["ratio"] > 1]
    assert len(st) == 1, st
    c = st[0]
    assert abs(c["step"] - SLOW_FROM) <= 1
    walls = _clean_walls(slow_run)
    lo, hi = c["before_steps"][0], c["after_steps"][1]
    before = [v for s, v in walls.items() if lo <= s < c["step"]]
    after = [v for s, v in walls.items() if c["step"] <= s <= hi]
    assert c["before"] == pytest.approx(statistics.median(before))
    assert c["after"] == pytest.approx(statistics.median(after))
    assert c["ratio"] == pytest.approx(c["after"] / c["before"])
    assert c["ratio"] > 1.5
    # the planted matmuls: aten::mm per step jumps at the first sample after SLOW_FROM
    mm = [x for x in j["change_points"] if x["metric"] == "op:aten::mm"]
    assert len(mm) == 1
    assert SLOW_FROM <= mm[0]["step"] <= SLOW_FROM + EVERY
    # ... and the nearest traces on both sides are compared: mm got slower there too
    comp = c["comparison"]
    assert Path(comp["before_trace"]).name == "step_000022.pt.trace.json.gz"
    assert Path(comp["after_trace"]).name == "step_000032.pt.trace.json.gz"
    row = next(r for r in comp["rows"] if r["key"] == "aten::mm")
    assert row["after_us"] > 2 * row["before_us"]


def test_op_series_matches_the_trace(slow_run: Path) -> None:
    """aten::mm time per step in one sample, from the raw trace JSON (median over its steps)."""
    t = trend(slow_run, compare_traces=False)
    steps, vals = t.values("op:aten::mm")
    trace = slow_run / "rank0" / "step_000032.pt.trace.json.gz"
    ev = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    marks = [e for e in ev if str(e.get("name", "")).startswith("ProfilerStep#")]
    per_step = []
    for m in marks:
        lo, hi = m["ts"], m["ts"] + m["dur"]
        per_step.append(
            sum(
                e["dur"]
                for e in ev
                if e.get("cat") == "cpu_op" and e.get("name") == "aten::mm" and lo <= e["ts"] < hi
            )
        )
    assert vals[steps.index(32)] == pytest.approx(statistics.median(per_step), rel=1e-3, abs=0.01)


def test_steady_run_has_no_change_point(
    tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    seen = []
    for _ in range(STEADY_ATTEMPTS):
        run, share = _record_steady(tmp_path_factory)
        code, out, _ = _cli(capsys, "trend", str(run), "--json")
        assert code == 0
        j = json.loads(out)
        assert j["series"]["step_time"]["steps"] == sorted(_clean_walls(run))
        found = [
            (c["metric"], c["step"], round(c["ratio"], 2))
            for c in j["change_points"]
            if share >= MIN_CPU_SHARE or not c["metric"].startswith("op:")
        ]
        if not found:
            break
        seen.append(found)
    else:
        pytest.fail(f"each of {STEADY_ATTEMPTS} steady runs had change points: {seen}")
    if share < MIN_CPU_SHARE:
        pytest.skip(f"operator series not checked: the run got {share:.0%} of a core")


def test_terminal_output_has_sparklines(slow_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _cli(capsys, "trend", str(slow_run))
    assert code == 0
    line = next(x for x in out.splitlines() if x.startswith("step_time"))
    assert set("▁█") <= set(line)
    assert "change at step" in out


def test_detect_ignores_a_spike_and_finds_a_shift() -> None:
    base = [10.0, 11.0, 9.0, 10.5, 9.5] * 4
    spiky = [*base[:10], 500.0, *base[10:]]
    assert detect(spiky, 5) == []
    shifted = [*base, 30.0, 31.0, 29.0, 30.5, 29.5, 30.0]
    (c,) = detect(shifted, 5)
    assert c.index == len(base)
    assert c.before == statistics.median(base)
    assert c.after == statistics.median(shifted[len(base) :])


def test_run_without_metrics_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "run.json").write_text("{}")
    code, out, err = _cli(capsys, "trend", str(tmp_path))
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1
    assert "metrics.jsonl" in err


def test_detect_boundary_next_to_a_spike() -> None:
    """A spike just before the new level must not pull the change point onto itself."""
    before = [10.0, 11.0, 9.0, 10.5, 9.5, 10.2, 9.8, 10.1, 50.0, 10.3]  # spike at index 8
    after = [20.0, 21.0, 19.0, 20.5, 19.5, 20.2, 19.8, 20.1]
    (c,) = detect(before + after, 5)
    assert c.index == len(before)


def test_html_report_carries_the_trend(
    slow_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import re

    out = tmp_path / "trend.html"
    code, _, _ = _cli(capsys, "trend", str(slow_run), "--html", str(out))
    assert code == 0
    page = out.read_text()
    m = re.search(r'<script type="application/json"[^>]*>(.*?)</script>', page, re.S)
    assert m is not None
    data = json.loads(m.group(1))
    steps = {c["step"] for c in data["trend"]["change_points"] if c["metric"] == "step_time"}
    assert any(abs(s - SLOW_FROM) <= 1 for s in steps)
    assert data["trend"]["series"]["step_time"]["steps"] == sorted(_clean_walls(slow_run))


def test_operator_change_below_one_percent_of_the_step_is_not_reported() -> None:
    """Two operators double at sample 6 of 12 in a 10 ms step: 3 ms of it (reported) and 60 µs
    (0.6 % of the step: not reported, however large its relative change)."""
    import polars as pl

    from opscope.trend.series import _changes

    firsts = [10 * i for i in range(12)]
    samples = pl.DataFrame({"first_step": firsts, "step_us": [10_000.0] * 12})
    big = [3000.0] * 6 + [6000.0] * 6
    small = [60.0] * 6 + [120.0] * 6
    series = pl.DataFrame(
        {
            "metric": ["op:big"] * 12 + ["op:small"] * 12,
            "step": firsts * 2,
            "value": big + small,
        }
    )
    found = _changes(series, samples)
    assert [(c["metric"], c["step"]) for c in found] == [("op:big", 60)]
    assert found[0]["before"] == 3000.0 and found[0]["after"] == 6000.0
