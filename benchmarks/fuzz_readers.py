"""Fuzz the readers for longer than CI does.

Two engines over the same targets as ``tests/test_fuzz.py`` (any input loads, or raises an
``InputError``; nothing else escapes):

- hypothesis (default): ``python benchmarks/fuzz_readers.py --examples 2000``
- atheris (coverage-guided; ``pip install atheris``):
  ``python benchmarks/fuzz_readers.py --atheris --target kineto -- -max_total_time=600``
  (arguments after ``--`` go to libFuzzer; crashes are written as ``crash-*`` files).

Targets: ``kineto`` (JSON text), ``gzip`` (gzip-wrapped JSON), ``bytes`` (raw bytes), and
``ascend_csv`` (an Ascend ``kernel_details.csv``). Exit status 1 when a property fails.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"


def run_hypothesis(examples: int, targets: list[str]) -> int:
    """Run the property tests of tests/test_fuzz.py with ``examples`` examples each."""
    names = {
        "kineto": "test_fuzz_kineto_json or test_fuzz_kineto_salvage",
        "gzip": "test_fuzz_kineto_gzip",
        "bytes": "test_fuzz_random_bytes",
        "ascend_csv": "test_fuzz_ascend_kernel_csv",
    }
    expr = " or ".join(f"({names[t]})" for t in targets)
    env = {**os.environ, "OPSCOPE_FUZZ_EXAMPLES": str(examples)}
    t0 = time.perf_counter()
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--timeout",
            "0",
            str(TESTS / "test_fuzz.py"),
            "-k",
            expr,
        ],
        env=env,
        check=False,
    )
    print(
        f"hypothesis: {examples} examples x {len(targets)} target(s) in "
        f"{time.perf_counter() - t0:.1f} s, exit {r.returncode}"
    )
    return 0 if r.returncode == 0 else 1


def _seed_corpus(target: str) -> Path:
    """A few well-formed inputs to start from (random bytes rarely reach the event decoder)."""
    import json
    import tempfile

    d = Path(tempfile.mkdtemp(prefix=f"opscope-atheris-{target}-"))
    ev = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::mm",
            "pid": 1,
            "tid": 1,
            "ts": 1.5,
            "dur": 2.0,
            "args": {"External id": 1, "Input Dims": [[2, 3]]},
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": 2.0,
            "dur": 0.5,
            "args": {"correlation": 7},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "gemm",
            "pid": 0,
            "tid": 7,
            "ts": 3.0,
            "dur": 1.0,
            "args": {"correlation": 7, "device": 0, "stream": 7},
        },
        {"ph": "s", "id": 7, "pid": 1, "tid": 1, "ts": 2.0, "cat": "ac2g", "name": "ac2g"},
        {
            "ph": "f",
            "id": 7,
            "pid": 0,
            "tid": 7,
            "ts": 3.0,
            "cat": "ac2g",
            "name": "ac2g",
            "bp": "e",
        },
    ]
    seeds = [json.dumps({"schemaVersion": 1, "traceEvents": ev}), json.dumps(ev)]
    if target == "ascend_csv":
        seeds = [
            "Name,Type,Accelerator Core,Start Time(us),Duration(us)\n"
            "MatMul,MatMulV2,AI_CORE,1736408883686740.710\t,12.5\n"
        ]
    for i, text in enumerate(seeds):
        (d / f"seed{i}").write_text(text)
    return d


def run_atheris(target: str, libfuzzer_args: list[str]) -> int:
    """Coverage-guided fuzzing of one target with atheris (bytes in, property checked)."""
    try:
        import atheris
    except ImportError:
        print("atheris is not installed: pip install atheris", file=sys.stderr)
        return 2
    sys.path.insert(0, str(TESTS))
    # Coverage feedback from opscope's own code only (instrumenting polars / hypothesis is slow).
    with atheris.instrument_imports(include=["opscope"]):
        import opscope.doctor
        import opscope.ingest.ascend
        import opscope.ingest.kineto  # noqa: F401
    import test_fuzz

    def one(data: bytes) -> None:
        if target == "kineto":
            test_fuzz.load_bytes(data)
        elif target == "salvage":
            test_fuzz.load_bytes(data, salvage=True)
        elif target == "gzip":
            import gzip

            test_fuzz.load_bytes(gzip.compress(data, compresslevel=1), name="f.json.gz")
        elif target == "ascend_csv":
            test_fuzz.load_ascend_csv(data.decode("utf-8", errors="replace"))
        else:
            test_fuzz.gunzip(data)

    if not any(not a.startswith("-") for a in libfuzzer_args):
        libfuzzer_args = [*libfuzzer_args, str(_seed_corpus(target))]
    atheris.Setup([sys.argv[0], *libfuzzer_args], one)
    atheris.Fuzz()
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parse arguments and run the chosen engine."""
    args = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in args:
        i = args.index("--")
        args, extra = args[:i], args[i + 1 :]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=1000, help="hypothesis examples per target")
    ap.add_argument(
        "--target",
        action="append",
        choices=["kineto", "salvage", "gzip", "bytes", "ascend_csv"],
        help="targets (default: all)",
    )
    ap.add_argument("--atheris", action="store_true", help="use atheris (one target)")
    ns = ap.parse_args(args)
    targets = ns.target or ["kineto", "gzip", "bytes", "ascend_csv"]
    if ns.atheris:
        return run_atheris(targets[0], extra)
    return run_hypothesis(ns.examples, [t for t in targets if t != "salvage"] or ["kineto"])


if __name__ == "__main__":
    sys.exit(main())
