"""Run directories: real torch.profiler (CPU) traces recorded here, model.json, metrics.jsonl."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import polars as pl
import pytest

import opscope
from opscope.errors import InputError
from opscope.ingest.rundir import read_run_dir

torch = pytest.importorskip("torch")

MODULES = [
    {
        "path": "Net",
        "type": "Sequential",
        "params": 36,
        "param_shapes": {},
        "dtypes": ["float32"],
        "contiguous": True,
    },
    {
        "path": "Net/Linear_0",
        "type": "Linear",
        "params": 36,
        "param_shapes": {"weight": [4, 8], "bias": [4]},
        "dtypes": ["float32"],
        "contiguous": False,
    },
]


def _record(out: Path, windows: int) -> list[Path]:
    """Profile a tiny model for ``windows`` one-step windows; one gzip trace per window."""
    out.mkdir(parents=True, exist_ok=True)
    model = torch.nn.Sequential(torch.nn.Linear(8, 4))
    written: list[Path] = []

    def save(prof: torch.profiler.profile) -> None:
        tmp = out / "tmp.json"
        prof.export_chrome_trace(str(tmp))
        f = out / f"step_{prof.step_num:05d}.pt.trace.json.gz"
        f.write_bytes(gzip.compress(tmp.read_bytes()))
        tmp.unlink()
        written.append(f)

    sched = torch.profiler.schedule(wait=1, warmup=0, active=1, repeat=windows)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        schedule=sched,
        on_trace_ready=save,
        record_shapes=True,
    ) as prof:
        for _ in range(2 * windows):
            model(torch.randn(2, 8)).sum().backward()
            prof.step()
    return written


def _x_counts(files: list[Path]) -> Counter[str]:
    c: Counter[str] = Counter()
    for f in files:
        for e in json.loads(gzip.decompress(f.read_bytes()))["traceEvents"]:
            if e.get("ph") == "X" and e.get("cat") != "Trace":
                c[e["name"]] += 1
    return c


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[int, list[Path]]]:
    root = tmp_path_factory.mktemp("run")
    traces = {0: _record(root / "rank0", 2), 1: _record(root / "rank1", 1)}
    (root / "run.json").write_text(json.dumps({"argv": ["train.py"], "steps": [1, 3]}))
    (root / "model.json").write_text(json.dumps({"modules": MODULES}))
    lines = [
        json.dumps(
            {
                "step": s,
                "wall_ns": 1_000_000 + s,
                "samples_per_s": 2.5 * s,
                "mem_allocated_peak": 100 * s,
                "mem_reserved_peak": 200 * s,
                "profiled": s in (1, 3),
                "rank": r,
            }
        )
        for r in (0, 1)
        for s in range(4)
    ]
    # A run killed mid-write leaves half a line.
    (root / "metrics.jsonl").write_text("\n".join(lines) + '\n{"step": 4, "wall')
    return root, traces


def test_all_traces_all_ranks(run_dir: tuple[Path, dict[int, list[Path]]]) -> None:
    root, traces = run_dir
    assert len(traces[0]) == 2 and len(traces[1]) == 1
    p = opscope.load(root)  # through the registry's sniffing
    assert p.ranks == [0, 1]
    assert p.meta["run"] == {"argv": ["train.py"], "steps": [1, 3]}
    assert p.meta["rundir"]["traces_per_rank"] == {"0": 2, "1": 1}
    for r, files in traces.items():
        got = Counter(dict(p.events.filter(pl.col("rank") == r).group_by("name").len().iter_rows()))
        assert got == _x_counts(files)
    # Rank 0's two windows are joined in time order: steps increase with ids.
    steps = (
        p.events.filter((pl.col("rank") == 0) & (pl.col("kind") == "step"))
        .sort("id")
        .get_column("name")
        .to_list()
    )
    want = []
    for f in traces[0]:
        want += sorted(
            e["name"]
            for e in json.loads(gzip.decompress(f.read_bytes()))["traceEvents"]
            if e.get("name", "").startswith("ProfilerStep#") and e.get("ph") == "X"
        )
    assert steps == want and len(steps) == 2


def test_modules_and_metrics(run_dir: tuple[Path, dict[int, list[Path]]]) -> None:
    root, _ = run_dir
    p = read_run_dir(root, workers=1)
    mods = p.modules.to_dicts()
    assert [m["path"] for m in mods] == [m["path"] for m in MODULES]
    assert json.loads(mods[1]["param_shapes"]) == MODULES[1]["param_shapes"]
    assert json.loads(mods[1]["dtypes"]) == ["float32"]
    assert [m["contiguous"] for m in mods] == [True, False]
    assert [m["params"] for m in mods] == [36, 36]
    want = [json.loads(line) for line in (root / "metrics.jsonl").read_text().splitlines()[:-1]]
    got = p.metrics.sort("rank", "step").to_dicts()
    assert len(got) == len(want) == 8
    for g, w in zip(got, sorted(want, key=lambda d: (d["rank"], d["step"])), strict=True):
        assert g == w
    assert p.meta["oddities"]["metrics.jsonl: unreadable lines (skipped)"] == 1


def test_run_without_traces(tmp_path: Path) -> None:
    (tmp_path / "run.json").write_text("{}")
    (tmp_path / "model.json").write_text(json.dumps({"modules": MODULES[:1]}))
    (tmp_path / "metrics.jsonl").write_text(
        json.dumps({"step": 0, "wall_ns": 5, "profiled": True, "rank": 0}) + "\n"
    )
    (tmp_path / "rank0").mkdir()
    p = opscope.load(tmp_path)
    assert p.events.height == 0
    assert p.metrics.height == 1 and p.modules.height == 1
    assert "no traces" in p.meta["rundir"]["note"]


def test_bad_run_json(tmp_path: Path) -> None:
    (tmp_path / "run.json").write_text("{not json")
    with pytest.raises(InputError, match=r"run\.json"):
        read_run_dir(tmp_path)
