"""Estimated vs measured savings on a CUDA device: `opscope advise` then `opscope verify` on
planted traces and on a small model recorded here with known issues. Skips cleanly without CUDA.

    python benchmarks/cuda_verify_check.py --out verify_check.json [--budget 1.0] [--deadline 200]
        [--wheels DIR]   # a folder of wheels of opscope's deps (polars, msgspec, rich, typer)

1. Planted traces (tests/helpers/planted.py, H100 device properties, the truth beside each):
   misaligned 4097³ bf16 GEMM, tall-skinny, few tiles, wave, materialised attention, SDPA head
   dim, poor-bandwidth elementwise, NCHW conv. Each trace is advised and every finding verified
   on this GPU: the fix (padding, SDPA, channels-last, compiled / as-run-here elementwise,
   whole-tile rate for gemm-non-pow2, N by whole tiles for waves) is timed against the original
   at the finding's shape and dtype. Few-tile and tall-skinny GEMM findings carry no benchmark
   any more (their split-K measured 0.99x / 0.91x on an H200, torch 2.11: a bound gap, not a
   fix; see docs/rules/gemm-tiles.md): they read "not measurable".
2. A small model recorded here with torch.profiler (3 active steps): a 4097x4097 bf16 matmul,
   a materialised attention softmax(q kᵀ) v, an unfused elementwise chain on a strided input
   and a depthwise conv in NCHW; advised with its own device properties and verified.

Prints one table row per finding (source, rule, estimated µs/step, measured µs/step, speedup,
status) and writes everything (findings, verification dicts, stage times, truth of the planted
traces) as JSON to ``--out`` after each trace, so a run cut short still leaves its rows. Every
stage is guarded: one failing trace or finding is recorded as an error, the run goes on. Never
uses the network. Exit 0 on success or skip, 1 when a stage failed or a finding claims more
than the step (the sanity list: a saving or a title above 100% of the step).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PLANTED_CASES = (
    "misaligned",
    "non-pow2",
    "skinny-misaligned",
    "tall-skinny",
    "gemm-few-tiles",
    "gemm-wave",
    "attention",
    "sdpa-headdim",
    "sdpa-short",
    "elementwise",
    "conv",
)


def _unpack_wheels(wheels: Path, into: Path) -> None:
    """Unpack every wheel under ``wheels`` into ``into`` and put it first on sys.path: opscope's
    dependencies on a machine that has torch but not them, without pip or the network (a wheel
    is a zip of its site-packages files)."""
    import zipfile

    found = sorted(wheels.glob("*.whl"))
    if not found:
        raise SystemExit(f"--wheels {wheels}: no .whl files there")
    for whl in found:
        with zipfile.ZipFile(whl) as z:
            z.extractall(into)
    sys.path.insert(0, str(into))


def _imports() -> Any:
    """opscope (installed, else the repo's src/) and the planted-trace generator."""
    try:
        import opscope  # noqa: F401
    except ImportError:
        sys.path.insert(0, str(ROOT / "src"))
    try:
        import polars  # noqa: F401
    except ImportError:
        raise SystemExit(
            "opscope's dependencies are missing (polars, msgspec, rich, typer): install them, or "
            "pass --wheels DIR with their wheels (pip download --only-binary=:all: "
            "--python-version 3.12 -d DIR polars msgspec rich typer)"
        ) from None
    sys.path.insert(0, str(ROOT / "tests"))
    from helpers import planted

    return planted


def _rows(source: str, found: Any, truth: dict[str, Any] | None) -> list[dict[str, Any]]:
    out = []
    for f in found:
        ver = f.verification or {}
        out.append(
            {
                "source": source,
                "id": f.id,
                "rule": f.rule,
                "title": f.title,
                "estimated_saving_us": f.saving_us,
                "saving_pct": f.saving_pct,
                "saving_method": f.saving_method,
                "measured_saving_us": ver.get("measured_saving_us"),
                "speedup": ver.get("speedup"),
                "status": ver.get("status", "not run"),
                "summary": ver.get("summary"),
                "verification": ver,
                "planted_rule": truth.get("rule") if truth else None,
                "planted_gap_us": truth.get("gap_us") if truth else None,
            }
        )
    return out


def _advise_verify(path: Path, budget: float, device: str) -> tuple[Any, dict[str, float]]:
    """``opscope verify PATH --device cuda``'s work: load, advise, verify (in this process,
    so that CUDA starts once)."""
    import opscope
    from opscope.advise import advise
    from opscope.advise.verify import verify

    t0 = time.perf_counter()
    profile = opscope.load(path)
    found = advise(profile)
    t1 = time.perf_counter()
    n = sum(1 for f in found if f.saving_us > 0)
    verified = verify(profile, found, device=device, budget_s=budget * max(n, 1))
    t2 = time.perf_counter()
    return verified, {"advise_s": t1 - t0, "verify_s": t2 - t1}


MODEL = '''
import torch, torch.nn as nn, torch.nn.functional as F

class Issues(nn.Module):
    """Known issues: a misaligned GEMM, materialised attention, an unfused elementwise chain
    on a strided input, a depthwise conv in NCHW (all bf16)."""

    def __init__(self):
        super().__init__()
        self.dw = nn.Conv2d(256, 256, 3, padding=1, groups=256, bias=False)

    def forward(self, a, b, q, k, v, x, y, img):
        g = torch.mm(a, b)                                   # 4097 x 4097 x 4097
        s = torch.matmul(q, k.transpose(-2, -1)) / 8.0       # materialised scores
        p = torch.softmax(s, dim=-1)
        o = torch.matmul(p, v)
        t = x.t() * y                                        # strided elementwise chain
        t = t + 1.0
        t = F.gelu(t)
        t = t * 0.5
        c = self.dw(img)                                     # depthwise, NCHW
        return g, o, t, c
'''


def _record(tmp: Path) -> Path:
    """Record the model above for 3 active steps; return the trace path."""
    import torch

    ns: dict[str, Any] = {}
    exec(compile(MODEL, "cuda_verify_model.py", "exec"), ns)  # the model's source, kept above
    dev, bf = "cuda", torch.bfloat16
    m = ns["Issues"]().to(dev, bf)
    g = torch.Generator(device=dev).manual_seed(0)

    def r(*s: int) -> Any:
        return torch.randn(*s, device=dev, dtype=bf, generator=g)

    args = (
        r(4097, 4097),
        r(4097, 4097),
        r(8, 12, 1024, 64),
        r(8, 12, 1024, 64),
        r(8, 12, 1024, 64),
        r(4096, 4096),
        r(4096, 4096),
        r(32, 256, 56, 56),
    )
    out = tmp / "recorded.json"
    sched = torch.profiler.schedule(wait=1, warmup=1, active=3)
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with (
        torch.no_grad(),
        torch.profiler.profile(
            activities=acts, schedule=sched, record_shapes=True, with_modules=True
        ) as prof,
    ):
        for _ in range(5):
            m(*args)
            prof.step()
    torch.cuda.synchronize()
    prof.export_chrome_trace(str(out))
    return out


def _table(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'source':<18} {'rule':<22} {'planted µs':>10} {'est µs':>9} {'meas µs':>9} "
        f"{'speedup':>8}  status"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        meas, sp, gap = r["measured_saving_us"], r["speedup"], r["planted_gap_us"]
        planted = f"{gap:.1f}" if gap is not None and r["rule"] == r["planted_rule"] else ""
        lines.append(
            f"{r['source']:<18} {r['rule']:<22} {planted:>10} {r['estimated_saving_us']:>9.1f} "
            f"{'—' if meas is None else f'{meas:.1f}':>9} {'—' if sp is None else f'{sp:.2f}':>8}"
            f"  {r['status']}"
        )
    return "\n".join(lines)


def _sanity(rows: list[dict[str, Any]]) -> list[str]:
    """Claims no finding may make: a saving above 100% of the step, a percentage of the step
    above 100 in a title."""
    import re

    bad = []
    for r in rows:
        if r["saving_pct"] > 100.0 + 1e-6:
            bad.append(f"{r['source']}: {r['rule']} saves {r['saving_pct']:.1f}% of the step")
        for pct in re.findall(r"(\d+(?:\.\d+)?)% of the step", r["title"]):
            if float(pct) > 100.0:
                bad.append(f"{r['source']}: {r['rule']} title {r['title']!r}")
    return bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="cuda_verify_check.json", help="JSON results path")
    ap.add_argument("--budget", type=float, default=1.0, help="benchmark seconds per finding")
    ap.add_argument(
        "--deadline", type=float, default=200.0, help="stop starting new traces after this (s)"
    )
    ap.add_argument("--cases", default=",".join(PLANTED_CASES), help="planted cases to run")
    ap.add_argument("--no-record", action="store_true", help="skip the recorded model")
    ap.add_argument(
        "--wheels", type=Path, help="a folder of wheels of opscope's dependencies to unpack first"
    )
    ap.add_argument(
        "--device", default="cuda", help="benchmark device (cuda; cpu only to try the script)"
    )
    args = ap.parse_args()
    out_path = Path(args.out)
    t_start = time.perf_counter()
    doc: dict[str, Any] = {"rows": [], "traces": [], "errors": []}

    def save() -> None:
        doc["elapsed_s"] = round(time.perf_counter() - t_start, 2)
        out_path.write_text(json.dumps(doc, indent=1, default=str))

    try:
        import torch
    except ImportError:
        doc["skipped"] = "torch not installed"
        save()
        print("SKIP: torch not installed")
        return 0
    if args.device == "cuda" and not torch.cuda.is_available():
        doc["skipped"] = "no CUDA device"
        save()
        print("SKIP: no CUDA device")
        return 0
    deps = tempfile.TemporaryDirectory()
    if args.wheels is not None:
        _unpack_wheels(args.wheels, Path(deps.name))
    planted = _imports()
    doc["device"] = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    doc["torch"] = torch.__version__
    print(f"device: {doc['device']}, torch {torch.__version__}")
    cases = [c for c in args.cases.split(",") if c]
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        jobs: list[tuple[str, Any]] = [(c, None) for c in cases]
        if not args.no_record:
            jobs.append(("recorded-model", _record))
        for name, rec in jobs:
            if time.perf_counter() - t_start > args.deadline:
                doc["errors"].append({"source": name, "error": "skipped: past --deadline"})
                save()
                continue
            t0 = time.perf_counter()
            try:
                truth: dict[str, Any] | None = None
                if rec is None:
                    if name not in planted.CASES:
                        raise ValueError(f"no planted case {name!r} ({', '.join(planted.CASES)})")
                    path, tr = planted.write(name, tmp)
                    truth = {"rule": tr.rule, "gap_us": tr.gap_us, "step_us": tr.step_us}
                else:
                    path = rec(tmp)
                found, times = _advise_verify(path, args.budget, args.device)
                rows = _rows(name, found, truth)
                doc["rows"].extend(rows)
                doc["traces"].append(
                    {"source": name, "truth": truth, "findings": len(rows), **times,
                     "total_s": round(time.perf_counter() - t0, 2)}
                )  # fmt: skip
                print(f"{name}: {len(rows)} findings in {time.perf_counter() - t0:.1f} s")
            except Exception as e:  # one trace failing must not lose the others' rows
                doc["errors"].append(
                    {"source": name, "error": f"{type(e).__name__}: {e}",
                     "traceback": traceback.format_exc()[-2000:]}
                )  # fmt: skip
                print(f"{name}: ERROR {type(e).__name__}: {e}")
            save()
    print()
    print(_table(doc["rows"]))
    doc["sanity"] = _sanity(doc["rows"])
    for line in doc["sanity"]:
        print(f"SANITY: {line}")
    save()
    print(f"\nwrote {out_path} ({len(doc['rows'])} findings, {len(doc['errors'])} errors, "
          f"{doc['elapsed_s']} s)")  # fmt: skip
    return 1 if doc["errors"] or doc["sanity"] else 0


if __name__ == "__main__":
    sys.exit(main())
