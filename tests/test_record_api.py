"""The Python API on real CPU torch: context manager, decorator, periodic sampling, options."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import opscope  # noqa: E402
from opscope.errors import RecordError  # noqa: E402


def profiler_steps(trace: Path) -> list[int]:
    with gzip.open(trace, "rt") as f:
        doc = json.load(f)
    names = {e.get("name", "") for e in doc["traceEvents"] if e.get("ph") == "X"}
    return sorted(int(n.split("#")[1]) for n in names if n.startswith("ProfilerStep#"))


def lines(run: Path) -> list[dict[str, object]]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


def train_step(model: torch.nn.Module, opt: torch.optim.Optimizer, batch: int = 3) -> None:
    loss = model(torch.randn(batch, 6)).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()


def tiny() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 1))
    return model, torch.optim.SGD(model.parameters(), lr=0.01)


def test_context_manager(tmp_path: Path) -> None:
    model, opt = tiny()
    run = tmp_path / "run"
    with opscope.profile(run, wait=0, warmup=1, active=2, with_stack=False) as p:
        for _ in range(5):
            train_step(model, opt)
            p.step()
    traces = sorted((run / "rank0").glob("*.pt.trace.json.gz"))
    assert [t.name for t in traces] == ["step_000001.pt.trace.json.gz"]
    assert profiler_steps(traces[0]) == [1, 2]
    # torch's own view of the same trace: the three Linear-forward addmm calls per profiled step
    with gzip.open(traces[0], "rt") as f:
        addmm = [e for e in json.load(f)["traceEvents"] if e.get("name") == "aten::addmm"]
    assert len(addmm) == 2 * 2
    assert [m["profiled"] for m in lines(run)] == [False, True, True, False, False]
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "completed" and info["steps"]["total"] == 5
    model_doc = json.loads((run / "model.json").read_text())
    assert [m["param_shapes"] for m in model_doc["modules"]] == [
        {}, {"weight": [5, 6], "bias": [5]}, {}, {"weight": [1, 5], "bias": [1]}]  # fmt: skip


def test_decorator_and_module_step(tmp_path: Path) -> None:
    model, opt = tiny()

    @opscope.profile(tmp_path / "d", wait=0, warmup=0, active=3, with_stack=False)
    def train(n: int) -> int:
        for _ in range(n):
            train_step(model, opt, batch=4)
            opscope.step()
        return n

    assert train(4) == 4
    assert train(3) == 3
    assert profiler_steps(tmp_path / "d" / "rank0" / "step_000000.pt.trace.json.gz") == [0, 1, 2]
    assert len(lines(tmp_path / "d")) == 4
    assert len(lines(tmp_path / "d-2")) == 3
    opscope.step()  # outside a recording: a no-op


def test_periodic_every(tmp_path: Path) -> None:
    model, opt = tiny()
    run = tmp_path / "p"
    with opscope.profile(run, wait=1, warmup=1, active=2, every=5, auto_step=True,
                         with_stack=False):  # fmt: skip
        for _ in range(14):
            train_step(model, opt)
    names = sorted(t.name for t in (run / "rank0").glob("*.gz"))
    # samples start at 1, 6, 11 (warmup one step, then two active)
    assert names == [f"step_{s:06d}.pt.trace.json.gz" for s in (2, 7, 12)]
    for s in (2, 7, 12):
        assert profiler_steps(run / "rank0" / f"step_{s:06d}.pt.trace.json.gz") == [s, s + 1]
    m = lines(run)
    assert [x["step"] for x in m] == list(range(14))
    assert [x["step"] for x in m if x["profiled"]] == [2, 3, 7, 8, 12, 13]


def test_periodic_sample_is_freed_without_gc(tmp_path: Path) -> None:
    """A finished sample's profiler and its results go when the sample ends, by reference
    counting: with the cyclic GC off, nothing collects them later."""
    import gc
    import weakref

    model, opt = tiny()
    gc.collect()
    gc.disable()
    try:
        with opscope.profile(tmp_path / "g", wait=1, warmup=1, active=2, every=5,
                             with_stack=False) as p:  # fmt: skip
            rec = p.recorder
            assert rec is not None
            train_step(model, opt)
            p.step()  # the sample (steps 1-3) starts
            assert rec._prof is not None
            outer, results = weakref.ref(rec._prof), weakref.ref(rec._prof.profiler)
            for _ in range(3):
                train_step(model, opt)
                p.step()
            assert rec._prof is None and rec.traces  # ended and saved
            assert outer() is None and results() is None
    finally:
        gc.enable()
    assert [t.name for t in rec.traces] == ["step_000002.pt.trace.json.gz"]


def test_periodic_every_epochs(tmp_path: Path) -> None:
    from torch.utils.data import DataLoader, TensorDataset

    model, opt = tiny()
    train = DataLoader(TensorDataset(torch.randn(12, 6)), batch_size=3)  # 4 steps per epoch
    val = DataLoader(TensorDataset(torch.randn(5, 6)), batch_size=5)
    run = tmp_path / "e"
    with opscope.profile(run, wait=0, warmup=1, active=2, every_epochs=2, auto_step=True,
                         with_stack=False):  # fmt: skip
        for _ in range(5):
            for (x,) in train:
                loss = model(x).sum()
                opt.zero_grad()
                loss.backward()
                opt.step()
            for (x,) in val:  # exhausting another loader must not count as an epoch
                model(x)
    names = sorted(t.name for t in (run / "rank0").glob("*.gz"))
    # epochs 0, 2, 4 start at steps 0, 8, 16; warmup one step, record two
    assert names == [f"step_{s:06d}.pt.trace.json.gz" for s in (1, 9, 17)]
    assert len(lines(run)) == 20


def test_bad_options(tmp_path: Path) -> None:
    with pytest.raises(RecordError, match="bogus_option"):
        opscope.profile(tmp_path, bogus_option=1)
    with (
        pytest.raises(RecordError, match="profiler_level"),
        opscope.profile(tmp_path / "x", profiler_level="Level1"),
    ):
        pass
    with pytest.raises(RecordError, match="every"):
        opscope.profile(tmp_path, every=2, warmup=1, active=3)


def test_loader_reads_the_run_directory(tmp_path: Path) -> None:
    model, opt = tiny()
    run = tmp_path / "run"
    with opscope.profile(run, wait=0, warmup=1, active=2, with_stack=False) as p:
        for _ in range(4):
            train_step(model, opt)
            p.step()
    prof = opscope.load(run)
    assert prof.metrics.height == 4
    assert prof.metrics.get_column("profiled").to_list() == [m["profiled"] for m in lines(run)]
    assert prof.modules.get_column("path").to_list() == ["", "0", "1", "2"]
    assert sorted(prof.steps.get_column("step").to_list()) == [1, 2]
