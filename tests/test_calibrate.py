"""opscope calibrate on the CPU with tiny sizes, its cache file, and the roofline using it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import polars as pl
import pytest

from opscope.analysis.registry import Options
from opscope.analysis.roofline import roofline
from opscope.cli.app import main
from opscope.model import Profile

pytest.importorskip("torch")


def test_calibrate_cpu_writes_cache_and_roofline_uses_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    rc = main(["calibrate", "--device", "cpu", "--sizes", "64,128", "--repeats", "3", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    cache = Path(out["cache_file"])
    assert cache.parent == tmp_path / "opscope" / "calibration"
    assert cache.name.startswith("cpu") and cache.suffix == ".json"
    # atomic write: the final file only, no temp file left beside it
    assert [p.name for p in cache.parent.iterdir()] == [cache.name]
    data = json.loads(cache.read_text())
    for dt in ("fp32", "fp64", "bf16"):
        f = data["matmul_flops"][dt]
        assert math.isfinite(f) and f > 0
    # the best figure is the best of the per-size measurements, each 2*n^3 / median seconds
    fp32 = [d for d in data["matmul_detail"] if d["dtype"] == "fp32"]
    assert {d["n"] for d in fp32} == {64, 128}
    for d in fp32:
        assert d["flops"] == pytest.approx(2 * d["n"] ** 3 / d["median_s"])
    assert data["matmul_flops"]["fp32"] == max(d["flops"] for d in fp32)
    assert math.isfinite(data["copy_bandwidth"]) and data["copy_bandwidth"] > 0

    # a host-only profile: one fp32 mm of 256^3 taking 1 ms on the host
    ev = pl.DataFrame(
        {
            "id": [0],
            "kind": ["cpu_op"],
            "name": ["aten::mm"],
            "ts_ns": [0],
            "dur_ns": [1_000_000],
            "input_dims": ["[[256,256],[256,256]]"],
            "input_types": ['["float","float"]'],
        }
    )
    res = roofline(Profile.from_tables(events=ev), Options())
    assert "calibrate" in res.peaks_note
    g = res.groups.row(0, named=True)
    flops, nbytes = 2 * 256**3, 3 * 256 * 256 * 4
    achieved = flops / 1e-3
    ridge = data["matmul_flops"]["fp32"] / data["copy_bandwidth"]
    if flops / nbytes >= ridge:
        expected = achieved / data["matmul_flops"]["fp32"] * 100
    else:
        expected = nbytes / 1e-3 / data["copy_bandwidth"] * 100
    assert g["pct_of_peak"] == pytest.approx(expected)


def test_calibrate_bad_sizes_is_a_user_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "--sizes", "abc", "--no-cache"]) == 2
    assert "--sizes" in capsys.readouterr().err


def test_no_calibration_means_no_cpu_peak(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    ev = pl.DataFrame(
        {"id": [0], "kind": ["cpu_op"], "name": ["aten::mm"], "ts_ns": [0], "dur_ns": [10_000],
         "input_dims": ["[[8,8],[8,8]]"], "input_types": ['["float","float"]']}
    )  # fmt: skip
    res = roofline(Profile.from_tables(events=ev), Options())
    assert res.groups.get_column("pct_of_peak").to_list() == [None]
    assert "opscope calibrate" in res.peaks_note


def test_cpu_calibration_is_not_used_for_an_unnamed_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opscope.analysis.devices import write_calibration

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    write_calibration(
        {"name": "cpu test", "vendor": "cpu", "matmul_flops": {"fp32": 1e11},
         "copy_bandwidth": 1e10}
    )  # fmt: skip
    ev = pl.DataFrame(
        {"id": [0, 1], "kind": ["cpu_op", "kernel"], "name": ["aten::mm", "gemm"],
         "ts_ns": [0, 10], "dur_ns": [20_000, 15_000], "op_id": [None, 0],
         "input_dims": ["[[512,512],[512,512]]", None],
         "input_types": ['["float","float"]', None]}
    )  # fmt: skip
    res = roofline(Profile.from_tables(events=ev), Options())
    assert res.groups.get_column("pct_of_peak").to_list() == [None]
    assert "does not name its device" in res.peaks_note
    # the same op on the host only does use the CPU calibration: 2*512^3 / 20 µs vs 1e11
    host = roofline(Profile.from_tables(events=ev.head(1)), Options())
    flops, nbytes = 2 * 512**3, 3 * 512 * 512 * 4
    assert flops / nbytes > 1e11 / 1e10  # right of the ridge: the compute roof
    assert host.groups.get_column("pct_of_peak")[0] == pytest.approx(flops / 20e-6 / 1e11 * 100)
