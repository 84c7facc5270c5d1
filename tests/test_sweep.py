"""Matmul sweeps on CPU at small sizes: shapes run, statistics, speedups, CLI, bad input."""

from __future__ import annotations

import json
import math

import polars as pl
import pytest

pytest.importorskip("torch")

import torch

from opscope.advise import _bench
from opscope.advise.sweep import SWEEP_SCHEMA, sweep_linear, sweep_matmul
from opscope.cli.app import main

pytestmark = pytest.mark.torch


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def test_sweep_matmul_rows_shapes_and_stats() -> None:
    df = sweep_matmul(
        60,
        100,
        36,
        "fp32",
        "cpu",
        variants=("original", "padded", "transposed_b", "contiguous_b", "dtype:bf16"),
        pad_to=32,
        budget_s=0.3,
    )
    assert dict(df.schema) == SWEEP_SCHEMA
    rows = {r["variant"]: r for r in df.iter_rows(named=True)}
    assert list(rows) == ["original", "padded", "transposed_b", "contiguous_b", "dtype:bf16"]
    assert (rows["padded"]["m"], rows["padded"]["k"], rows["padded"]["n"]) == (64, 128, 64)
    assert (rows["original"]["m"], rows["original"]["k"], rows["original"]["n"]) == (60, 100, 36)
    assert rows["dtype:bf16"]["dtype"] == "bf16"
    orig = rows["original"]["median_us"]
    for r in rows.values():
        assert r["device"] == "cpu"
        assert r["repeats"] >= _bench.MIN_REPEATS
        assert 0 < r["q1_us"] <= r["median_us"] <= r["q3_us"]
        assert r["iqr_us"] == pytest.approx(r["q3_us"] - r["q1_us"])
        assert r["speedup"] == pytest.approx(orig / r["median_us"])
        flops = 2 * r["m"] * r["k"] * r["n"]
        assert r["tflops"] == pytest.approx(flops / (r["median_us"] * 1e-6) / 1e12)
    assert rows["original"]["speedup"] == 1.0 and rows["original"]["faster"] is False


def test_sweep_linear_has_the_seed_variants() -> None:
    df = sweep_linear(32, 64, 16, "fp32", "cpu", budget_s=0.2)
    assert df.get_column("variant").to_list() == ["original", "contiguous_b", "linear", "addmm"]
    assert df.filter(pl.col("variant") == "original").get_column("speedup").item() == 1.0


def test_identical_variant_is_not_faster() -> None:
    df = sweep_matmul(48, 48, 48, "fp32", "cpu", variants=("original", "identity"), budget_s=0.3)
    ident = df.filter(pl.col("variant") == "identity").row(0, named=True)
    assert ident["faster"] is False
    assert math.isfinite(ident["speedup"]) and ident["speedup"] > 0


def test_timing_statistics_against_statistics_module() -> None:
    import statistics

    t = _bench.Timing((5.0, 1.0, 3.0, 2.0, 4.0), 1)
    assert t.median_ns == statistics.median(t.samples_ns)
    q = statistics.quantiles(t.samples_ns, n=4, method="inclusive")
    assert (t.q1_ns, t.q3_ns) == (q[0], q[2])


def test_bad_inputs_raise_one_line_errors() -> None:
    with pytest.raises(_bench.BenchError, match="unknown matmul variant"):
        sweep_matmul(8, 8, 8, "fp32", "cpu", variants=("original", "nope"), budget_s=0.05)
    with pytest.raises(_bench.BenchError, match="unsupported dtype"):
        sweep_matmul(8, 8, 8, "int3", "cpu", budget_s=0.05)
    with pytest.raises(_bench.BenchError, match="too large"):
        sweep_matmul(81920, 4096, 8192, "fp32", "cpu", budget_s=0.05)
    if not torch.cuda.is_available():
        with pytest.raises(_bench.BenchError, match="no CUDA"):
            sweep_matmul(8, 8, 8, "fp32", "cuda", budget_s=0.05)


def test_cli_sweep_json(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(
        [
            "sweep",
            "matmul",
            "--m",
            "40",
            "--k",
            "72",
            "--n",
            "24",
            "--dtype",
            "fp32",
            "--device",
            "cpu",
            "--pad-to",
            "32",
            "--budget",
            "0.2",
            "--json",
            "--variants",
            "original,padded",
        ]
    )
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["variant"] for r in out["sweep"]] == ["original", "padded"]
    assert [out["sweep"][1][k] for k in ("m", "k", "n")] == [64, 96, 32]


def test_cli_sweep_bad_dtype_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(
        [
            "sweep",
            "matmul",
            "--m",
            "4",
            "--k",
            "4",
            "--n",
            "4",
            "--dtype",
            "int3",
            "--device",
            "cpu",
            "--budget",
            "0.05",
        ]
    )
    assert rc == 2
    err = capsys.readouterr().err
    assert "unsupported dtype" in err and "Traceback" not in err


def test_sweep_conv_variants_and_shapes(capsys: pytest.CaptureFixture[str]) -> None:
    from opscope.advise.sweep import sweep_conv

    df = sweep_conv(2, 3, 12, 12, 10, 3, "fp32", "cpu", pad_to=8, budget_s=0.2)
    rows = {r["variant"]: r for r in df.iter_rows(named=True)}
    assert list(rows) == ["original", "padded_channels", "channels_last"]
    assert (rows["padded_channels"]["c"], rows["padded_channels"]["k"]) == (8, 16)
    assert (rows["channels_last"]["c"], rows["channels_last"]["k"]) == (3, 10)
    for r in rows.values():
        assert r["speedup"] == pytest.approx(rows["original"]["median_us"] / r["median_us"])
    rc = main(
        [
            "sweep",
            "conv",
            "--n",
            "1",
            "--c",
            "4",
            "--h",
            "8",
            "--w",
            "8",
            "--k",
            "4",
            "--device",
            "cpu",
            "--budget",
            "0.1",
            "--json",
        ]
    )
    assert rc == 0
    assert len(json.loads(capsys.readouterr().out)["sweep"]) == 3
