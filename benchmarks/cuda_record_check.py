"""The recording checks on a CUDA device, for whenever one is at hand; skips cleanly without.

Runs ``opscope record`` on a tiny CUDA training script and checks: the trace holds exactly
``active`` ProfilerStep#N and GPU kernels, metrics.jsonl has device memory peaks, run.json names
the GPU; then runs benchmarks/record_overhead.py on ``--device cuda``. Exit 0 on success or skip.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import tempfile
from pathlib import Path

SCRIPT = """
import torch
m = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).cuda()
opt = torch.optim.SGD(m.parameters(), lr=0.01)
for _ in range(8):
    loss = m(torch.randn(32, 512, device="cuda")).sum()
    opt.zero_grad(); loss.backward(); opt.step()
"""


def main() -> int:
    try:
        import torch
    except ImportError:
        print("SKIP: torch not installed")
        return 0
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device")
        return 0
    with tempfile.TemporaryDirectory() as d:
        script = Path(d) / "train_cuda.py"
        script.write_text(SCRIPT)
        run = Path(d) / "run"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "opscope",
                "record",
                "--active",
                "3",
                "--out",
                str(run),
                "--",
                "python",
                str(script),
            ],
            check=True,
        )
        trace = next((run / "rank0").glob("*.pt.trace.json.gz"))
        with gzip.open(trace, "rt") as f:
            events = json.load(f)["traceEvents"]
        steps = {e["name"] for e in events if e.get("name", "").startswith("ProfilerStep#")}
        kernels = [e for e in events if e.get("cat") == "kernel"]
        lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        info = json.loads((run / "run.json").read_text())
        ok = (
            len(steps) == 3
            and len(kernels) > 0
            and all(x["mem_allocated_peak"] for x in lines)
            and info["device"]["kind"] == "cuda"
        )
        print(f"steps={sorted(steps)} kernels={len(kernels)} device={info['device']}")
        print(f"processes={info['device_processes']}")
        if not ok:
            print("FAIL")
            return 1
    bench = Path(__file__).with_name("record_overhead.py")
    return subprocess.run([sys.executable, str(bench), "--device", "cuda"], check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
