"""opscope trend.

The detector's verdicts (which change points, at which step, with which medians) are checked on
generated run directories whose truth is known: planted step times and operator times written as
metrics.jsonl and periodic traces (``helpers.synth.trend_run``). A real periodic CPU run with a
slowdown planted at a known step is checked only for what the machine's speed cannot change: the
planted change point is among those found, at its step, in the operator series (aten::mm's share
of the step, which a loaded machine does not move); every step-time change point found has the
medians of metrics.jsonl parsed with the stdlib; the operator series equals the raw trace; the
comparison names the traces on both sides and the planted matmuls (150 per step against a
handful) got slower."""

from __future__ import annotations

import gzip
import json
import random
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

from helpers.synth import TrendRun, trend_run

STEPS = 60
SLOW_FROM = 30
EVERY = 10
SETTINGS = RecordSettings(wait=1, warmup=1, active=3, every=EVERY)
EXTRA = 150
"""Planted matmuls per step from SLOW_FROM on: ~55 ms on a ~6 ms step (9x on a quiet machine)."""


@pytest.fixture(scope="module")
def slow_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("trend") / "slow"
    record_callable(lambda: train(STEPS, SLOW_FROM, extra=EXTRA), out, SETTINGS)
    return out


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


@pytest.mark.slow
@pytest.mark.timing
def test_planted_slowdown_found_at_its_step(
    slow_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _cli(capsys, "trend", str(slow_run), "--json")
    assert code == 0
    j = json.loads(out)
    assert j["steps"] == STEPS
    # The planted regression is found at its step in the operator series: aten::mm's share of
    # the step jumps ~100x at the first sample after SLOW_FROM. Shares are what a loaded machine
    # cannot move (it slows every operator of a sample alike), so this holds at any load.
    mm = [x for x in j["change_points"] if x["metric"] == "op:aten::mm"]
    assert [x["step"] for x in mm] == [32]
    assert mm[0]["after"] > 10 * mm[0]["before"]
    # ... and the nearest traces on both sides are compared: 150 more matmuls per step after it
    comp = mm[0]["comparison"]
    assert Path(comp["before_trace"]).name == "step_000022.pt.trace.json.gz"
    assert Path(comp["after_trace"]).name == "step_000032.pt.trace.json.gz"
    row = next(r for r in comp["rows"] if r["key"] == "aten::mm")
    assert row["after_us"] > 10 * row["before_us"]
    # Step time is wall clock: at load ~7 on 2 cores the slow segment's scatter (steps of 140 to
    # 490 ms) was beyond the noise rule in 2 of 3 runs, and a machine changing speed mid-run adds
    # change points of its own; whether it is found is pinned on generated runs below. Whatever
    # is found has the medians of its segments in metrics.jsonl.
    walls = _clean_walls(slow_run)
    for c in j["change_points"]:
        if c["metric"] != "step_time":
            continue
        lo, hi = c["before_steps"][0], c["after_steps"][1]
        before = [v for s, v in walls.items() if lo <= s < c["step"]]
        after = [v for s, v in walls.items() if c["step"] <= s <= hi]
        assert c["before"] == pytest.approx(statistics.median(before))
        assert c["after"] == pytest.approx(statistics.median(after))
        assert c["ratio"] == pytest.approx(c["after"] / c["before"])


@pytest.mark.slow
@pytest.mark.timing
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


@pytest.mark.slow
@pytest.mark.timing
def test_step_time_series_is_each_steps_ns_over_1000(slow_run: Path) -> None:
    """Each step's value is its metrics.jsonl wall_ns / 1000, one IEEE division (opscope.units),
    bit for bit: not a query's product by 1/1000, one ulp off for ~13% of integers."""
    steps, vals = trend(slow_run, compare_traces=False).values("step_time")
    rows = [json.loads(x) for x in (slow_run / "metrics.jsonl").read_text().splitlines() if x]
    wall = {r["step"]: r["wall_ns"] for r in rows}
    assert len(steps) > 10
    assert [v.hex() for v in vals] == [(wall[s] / 1000.0).hex() for s in steps]


@pytest.mark.slow
@pytest.mark.timing
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


@pytest.mark.slow
@pytest.mark.timing
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
    found = {(c["metric"], c["step"]) for c in data["trend"]["change_points"]}
    assert ("op:aten::mm", 32) in found
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


# ------------------------------------------------------------------- generated runs, known truth

BASE_US = 9000.0
MM_BEFORE_US, MM_AFTER_US = 50.0, 6000.0
TANH_US = 5000.0


def _noisy_walls(seed: int, n: int = STEPS) -> list[float]:
    """Step times as a shared 2-core machine gives them for identical steps (the recorded
    trend runs' figures): +-4 % jitter, a 1.8x profiler step now and then (left out by trend), a
    3-step GC/IO hiccup at 5x, and a slow 15 % drift (below the 25 % a change point needs)."""
    r = random.Random(seed)
    walls = []
    for i in range(n):
        drift = 1.0 + 0.15 * min(1.0, max(0.0, (i - 40) / 10))
        w = BASE_US * drift * r.uniform(0.96, 1.04)
        if 17 <= i < 20:
            w *= 5.0
        walls.append(w)
    return walls


def _profiled_slower(run: TrendRun) -> None:
    """The profiler's own overhead on the steps it is on for (trend must leave them out)."""
    rows = [json.loads(x) for x in (run.path / "metrics.jsonl").read_text().splitlines()]
    for row in rows:
        if row["profiled"]:
            row["wall_ns"] = round(row["wall_ns"] * 1.8)
    (run.path / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))


def _medians(run: TrendRun, walls: list[float], at: int) -> tuple[float, float, int, int]:
    """Medians of the clean steps before / from ``at`` (segment: the whole series here)."""
    before = [walls[s] for s in run.clean if s < at]
    after = [walls[s] for s in run.clean if s >= at]
    return statistics.median(before), statistics.median(after), len(before), len(after)


def test_generated_planted_slowdown_found_exactly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Identical noisy steps, 2x slower from step 30 (30 ms of matmuls added): exactly one step-
    time and one throughput change point, at step 30, with the clean steps' medians; the mm
    series changes at the first sample after it; the memory series and the unchanged tanh
    (whose share of the step halves, but not its time) have none."""
    walls = _noisy_walls(1)
    walls = [w + (BASE_US if i >= SLOW_FROM else 0.0) for i, w in enumerate(walls)]

    def ops(first: int) -> dict[str, float]:
        mm = MM_AFTER_US if first >= SLOW_FROM else MM_BEFORE_US
        return {"aten::tanh": TANH_US, "aten::mm": mm}

    run = trend_run(tmp_path / "run", walls, ops_us=ops, every=EVERY)
    _profiled_slower(run)
    code, out, _ = _cli(capsys, "trend", str(run.path), "--json")
    assert code == 0
    j = json.loads(out)
    assert j["steps"] == STEPS
    assert j["series"]["step_time"]["steps"] == run.clean
    found = [(c["metric"], c["step"]) for c in j["change_points"]]
    assert found == [("samples_per_s", SLOW_FROM), ("step_time", SLOW_FROM), ("op:aten::mm", 32)]
    st = j["change_points"][1]
    b, a, nb, na = _medians(run, walls, SLOW_FROM)
    assert st["before"] == pytest.approx(b) and st["after"] == pytest.approx(a)
    assert (st["before_steps"], st["after_steps"]) == (
        [run.clean[0], max(s for s in run.clean if s < SLOW_FROM)],
        [min(s for s in run.clean if s >= SLOW_FROM), run.clean[-1]],
    )
    assert nb + na == len(run.clean)
    mm = next(c for c in j["change_points"] if c["metric"] == "op:aten::mm")
    assert (mm["before"], mm["after"]) == (MM_BEFORE_US, MM_AFTER_US)
    comp = st["comparison"]
    assert Path(comp["before_trace"]).name == "step_000022.pt.trace.json.gz"
    assert Path(comp["after_trace"]).name == "step_000032.pt.trace.json.gz"
    row = next(r for r in comp["rows"] if r["key"] == "aten::mm")
    # compare()'s rows are the traces' totals: 3 steps of the planted µs each
    assert (row["before_us"], row["after_us"]) == pytest.approx((3 * MM_BEFORE_US, 3 * MM_AFTER_US))


@pytest.mark.parametrize("seed", range(5))
def test_generated_steady_run_has_no_change_point(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], seed: int
) -> None:
    """Identical steps with a shared machine's noise (jitter, a 3-step hiccup, a 15 % drift,
    profiler overhead on the sampled steps) and steady operators (+-10 % per sample): nothing."""
    walls = _noisy_walls(100 + seed)
    r = random.Random(seed)

    def ops(first: int) -> dict[str, float]:
        return {"aten::tanh": TANH_US * r.uniform(0.9, 1.1), "aten::mm": MM_BEFORE_US}

    run = trend_run(tmp_path / "run", walls, ops_us=ops, every=EVERY)
    _profiled_slower(run)
    code, out, _ = _cli(capsys, "trend", str(run.path), "--json")
    assert code == 0
    j = json.loads(out)
    assert j["series"]["step_time"]["steps"] == run.clean
    assert j["change_points"] == []


def test_generated_machine_slowdown_is_a_step_time_change_not_an_operator_change(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What broke the real-run test's old ``exactly one change point``: the machine got 40 %
    slower from step 16, every operator with it. That is a step-time change point, at its step,
    rightly reported; the operators are searched as shares of the step, which did not move, so
    none of them is an operator change."""
    slow_machine = 16
    speed = [1.4 if i >= slow_machine else 1.0 for i in range(STEPS)]
    r = random.Random(3)
    walls = [BASE_US * speed[i] * r.uniform(0.97, 1.03) for i in range(STEPS)]

    def ops(first: int) -> dict[str, float]:
        return {"aten::tanh": TANH_US * speed[first], "aten::mm": 2000.0 * speed[first]}

    run = trend_run(tmp_path / "run", walls, ops_us=ops, every=EVERY)
    code, out, _ = _cli(capsys, "trend", str(run.path), "--json")
    assert code == 0
    j = json.loads(out)
    found = [(c["metric"], c["step"]) for c in j["change_points"]]
    assert found == [("samples_per_s", slow_machine), ("step_time", slow_machine)]
    st = j["change_points"][1]
    b, a, _, _ = _medians(run, walls, slow_machine)
    assert (st["before"], st["after"]) == (pytest.approx(b), pytest.approx(a))
    assert st["ratio"] == pytest.approx(a / b)
