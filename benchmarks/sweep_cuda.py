"""Sweep matmul shapes on a CUDA device: aligned vs misaligned dims, layouts, dtypes.

    python benchmarks/sweep_cuda.py [--budget 0.5] [--out sweep_cuda.csv]

Prints one table per shape (variant, median, IQR, TFLOP/s, speedup vs the original) and writes
all rows as CSV. Exits 0 with a note when there is no CUDA device.
"""

from __future__ import annotations

import argparse
import sys

SHAPES = [
    (256, 1024, 256),  # the seed's linear_11
    (256, 1000, 256),  # misaligned inner dim
    (4096, 4096, 4095),  # one short of aligned
    (4096, 4096, 4096),
    (8192, 15365, 4096),  # the Ascend sample's misaligned MatMulV3
    (32, 9216, 4096),  # AlexNet's classifier
]
DTYPES = ("bf16", "fp16", "tf32", "fp32")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--budget", type=float, default=0.5, help="seconds per shape and dtype")
    ap.add_argument("--out", default="sweep_cuda.csv")
    args = ap.parse_args()
    import polars as pl
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: nothing to sweep")
        return 0
    from opscope.advise.sweep import sweep_matmul

    frames = []
    for m, k, n in SHAPES:
        for dt in DTYPES:
            df = sweep_matmul(
                m,
                k,
                n,
                dt,
                "cuda",
                variants=("original", "padded", "transposed_b", "contiguous_b", "linear"),
                budget_s=args.budget,
            )
            frames.append(df)
            print(f"\n{m}x{k} @ {k}x{n} {dt} on {torch.cuda.get_device_name()}")
            print(
                df.select(
                    "variant", "m", "k", "n", "median_us", "iqr_us", "tflops", "speedup", "faster"
                )
            )
    pl.concat(frames).write_csv(args.out)
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
