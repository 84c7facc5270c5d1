"""`opscope record` under torchrun with two gloo ranks: one folder per rank."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

SCRIPT = Path(__file__).parent / "scripts" / "train_ddp.py"


@pytest.mark.slow
def test_torchrun_two_ranks(tmp_path: Path) -> None:
    torchrun = Path(sys.executable).with_name("torchrun")
    if not torchrun.exists() and shutil.which("torchrun") is None:
        pytest.skip("torchrun not installed")
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
    cmd += ["--master-port", "29577", "-m", "opscope", "record", "--active", "2"]
    cmd += ["--out", str(run), "--", "python", str(SCRIPT)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=240, check=False)
    assert p.returncode == 0, p.stderr[-3000:]
    for r in (0, 1):
        trace = run / f"rank{r}" / "step_000002.pt.trace.json.gz"
        with gzip.open(trace, "rt") as f:
            names = {e.get("name", "") for e in json.load(f)["traceEvents"]}
        assert {n for n in names if n.startswith("ProfilerStep#")} == {
            "ProfilerStep#2",
            "ProfilerStep#3",
        }
        assert any("allreduce" in n for n in names)
    m = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert sorted((x["rank"], x["step"]) for x in m) == [(r, s) for r in (0, 1) for s in range(6)]
    info = json.loads((run / "run.json").read_text())
    assert info["world_size"] == 2 and info["steps"]["total"] == 6
    model = json.loads((run / "model.json").read_text())
    assert [(x["path"], x["param_shapes"]) for x in model["modules"]] == [
        ("", {}), ("module", {"weight": [2, 4], "bias": [2]})]  # fmt: skip
