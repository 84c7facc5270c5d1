"""The recorder saves the training DataLoader's length (steps per epoch) in run.json, and compare
turns the median step into an epoch time with it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import opscope


def _train(out: Path, batches: int, eval_batches: int = 0) -> Path:
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = TensorDataset(torch.randn(4 * batches, 8), torch.randn(4 * batches, 2))
    loader = DataLoader(data, batch_size=4)
    with opscope.profile(out, wait=0, warmup=1, active=2) as p:
        for x, y in loader:
            loss = (model(x) - y).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            p.step()
        if eval_batches:  # a second loader made after the first step is not the training one
            for _ in DataLoader(TensorDataset(torch.randn(4 * eval_batches, 8)), batch_size=4):
                pass
    return out


def test_run_json_has_the_training_loaders_length(tmp_path: Path) -> None:
    run = _train(tmp_path / "a", batches=7, eval_batches=3)
    info = json.loads((run / "run.json").read_text())
    assert info["steps"]["per_epoch"] == 7
    assert info["steps"]["total"] == 7


def test_compare_gives_epoch_time_from_the_run(tmp_path: Path) -> None:
    a = _train(tmp_path / "a", batches=6)
    b = _train(tmp_path / "b", batches=6)
    res = opscope.compare(a, b)
    assert res.steps_per_epoch == 6
    rows = [r for r in res.to_json()["summary"] if str(r.get("metric", "")).startswith("epoch")]
    assert rows and rows[0]["metric"].startswith("epoch time (6 steps")
