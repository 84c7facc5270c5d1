"""compare's semantic rows (issue 21): a layer's GEMM matched across op names, kernels and
devices; the headline, the rows that explain it, roofline figures per row, the HTML page, and a
significance that agrees with the noise band it prints.

Every expected figure is computed from what the generators planted (tests/helpers/compare_synth).
"""

from __future__ import annotations

import json
import random
import statistics
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from helpers.compare_synth import GemmSide, fwd_key, gemm_side, single_gemm_trace
from helpers.synth import training
from opscope.analysis.compare import NOISE_K, Comparison, compare, step_time_change
from opscope.analysis.devices import match
from opscope.cli.app import main

M, N, K = 1024, 4096, 2048
A100 = "NVIDIA A100-SXM4-80GB"
V100 = "Tesla V100-SXM2-16GB"
BF16 = "c10::BFloat16"


def _semantic(c: Comparison, key: str) -> dict[str, Any]:
    rows = c.rows.filter((pl.col("kind") == "semantic") & (pl.col("key") == key)).to_dicts()
    assert len(rows) == 1, (key, c.rows.filter(pl.col("kind") == "semantic")["key"].to_list())
    return rows[0]


@pytest.mark.parametrize(
    ("before", "after"),
    [("matmul", "linear"), ("mm", "addmm"), ("linear", "matmul"), ("addmm", "mm")],
)
def test_a_layer_whose_gemm_changed_op_and_kernel_is_one_row(before: str, after: str) -> None:
    a = gemm_side(GemmSide(before, "volta_sgemm_128x64_nn", 400.0), seed=1)
    b = gemm_side(GemmSide(after, "sm80_xmma_gemm_f32f32_tn", 100.0), seed=2)
    c = compare(a.profile, b.profile)
    key = fwd_key(GemmSide(before, "", 0.0))
    assert key == "Net_0/encoder/Linear_11 · fwd · GEMM M=1024 N=4096 K=2048 · fp32"
    r = _semantic(c, key)
    truth = sum(a.fwd_kernel_us) / sum(b.fwd_kernel_us)  # from the planted kernels
    assert r["speedup"] == pytest.approx(truth, rel=0.02)
    # kernel times are stored as whole ns: 6 kernels, at most 0.5 ns off each
    assert r["before_us"] == pytest.approx(sum(a.fwd_kernel_us), abs=0.003)
    assert r["after_us"] == pytest.approx(sum(b.fwd_kernel_us), abs=0.003)
    assert r["match"] == "exact" and r["verdict"] == "gain"
    assert (r["calls_before"], r["calls_after"]) == (6, 6)  # one anchor op per step
    # the layer is matched, not "removed" + "added"
    for df in (c.added, c.removed):
        assert df.filter(pl.col("kind") == "semantic").height == 0
    # the unchanged backward GEMMs and relu are noise
    others = c.rows.filter((pl.col("kind") == "semantic") & (pl.col("key") != key))
    assert others.height == 3
    assert set(others.get_column("verdict")) == {"noise"}


def test_cross_device_pair_matches_the_layer_and_warns() -> None:
    a = gemm_side(GemmSide("matmul", "volta_sgemm_128x64_nn", 400.0, device=V100), seed=3)
    b = gemm_side(GemmSide("linear", "ampere_bf16_s16816gemm", 100.0, device=A100), seed=4)
    c = compare(a.profile, b.profile)
    r = _semantic(c, fwd_key(GemmSide("linear", "", 0.0)))
    assert r["speedup"] == pytest.approx(sum(a.fwd_kernel_us) / sum(b.fwd_kernel_us), rel=0.02)
    assert len(c.warnings) == 1 and V100 in c.warnings[0] and A100 in c.warnings[0]
    assert c.sides.get_column("device").to_list() == [V100, A100]
    # roofline figures of the row: 2MNK per call, 6 calls, over the row's time
    h = c.heavy.filter(pl.col("key") == r["key"]).row(0, named=True)
    flops = 6 * 2 * M * N * K
    # (rel 1e-5: the row's time is whole ns per kernel, the plan's is not)
    assert h["before_tflops"] == pytest.approx(
        flops / (sum(a.fwd_kernel_us) * 1e-6) / 1e12, rel=1e-5
    )
    assert h["after_tflops"] == pytest.approx(
        flops / (sum(b.fwd_kernel_us) * 1e-6) / 1e12, rel=1e-5
    )
    v100, a100 = match(V100), match(A100)
    assert v100 is not None and a100 is not None
    peak_a = a100.peak("fp32", "matrix")
    assert peak_a
    assert h["after_flops_util"] == pytest.approx(h["after_tflops"] * 1e12 / peak_a)
    assert h["after_bw_util"] == pytest.approx(h["after_gbps"] * 1e9 / a100.mem_bw)  # type: ignore[operator]
    assert h["before_bw_util"] == pytest.approx(h["before_gbps"] * 1e9 / v100.mem_bw)  # type: ignore[operator]
    # a row's noise band is per step, and says so beside its totals
    from opscope.report.compare_render import render_markdown

    bwd = c.heavy.filter(pl.col("key").str.contains(" · bwd · ")).row(0, named=True)
    assert bwd["verdict"] == "noise"
    assert "/step)" in render_markdown(c)


def test_a_peak_the_table_lacks_is_n_a_and_device_names_supply_one() -> None:
    a = gemm_side(GemmSide("mm", "k1", 400.0, device=None), seed=5, dtype=BF16)
    b = gemm_side(GemmSide("mm", "k1", 100.0, device=None), seed=6, dtype=BF16)
    key = "Net_0/encoder/Linear_11 · fwd · GEMM M=1024 N=4096 K=2048 · bf16"
    plain = compare(a.profile, b.profile)
    h = plain.heavy.filter(pl.col("key") == key).row(0, named=True)
    assert h["before_flops_util"] is None and h["after_flops_util"] is None
    assert h["before_tflops"] is not None  # achieved figures need no peak
    # no peak on either side: the summary has no utilisation row, the table says n/a
    s = {r["metric"]: r for r in plain.summary.to_dicts()}
    assert f"FLOP/s utilisation ({key})" not in s
    from opscope.report.compare_render import render_markdown

    assert "| n/a → n/a |" in render_markdown(plain)
    named = compare(a.profile, b.profile, devices=(A100, A100))
    h = named.heavy.filter(pl.col("key") == key).row(0, named=True)
    spec = match(A100)
    assert spec is not None
    peak = spec.peak("bf16", "matrix")
    assert peak
    assert h["after_flops_util"] == pytest.approx(
        6 * 2 * M * N * K / (sum(b.fwd_kernel_us) * 1e-6) / peak, rel=1e-5
    )
    assert named.warnings == ()


def test_padded_shapes_match_by_module_and_class() -> None:
    a = gemm_side(GemmSide("linear", "gemm_a", 400.0), seed=7, k=1000)
    b = gemm_side(GemmSide("linear", "gemm_b", 250.0, k_pad=1024), seed=8, k=1000)
    c = compare(a.profile, b.profile)
    r = _semantic(c, "Net_0/encoder/Linear_11 · fwd · GEMM (shape changed)")
    assert r["match"] == "shape changed"
    assert r["speedup"] == pytest.approx(sum(a.fwd_kernel_us) / sum(b.fwd_kernel_us), rel=0.02)


def test_a_profile_against_itself_is_noise_everywhere() -> None:
    a = gemm_side(GemmSide("linear", "gemm", 400.0), seed=9, jitter=0.05)
    c = compare(a.profile, a.profile)
    sem = c.rows.filter(pl.col("kind") == "semantic")
    assert sem.height == 4
    assert set(sem.get_column("verdict")) == {"noise"}
    assert not any(c.rows.get_column("significant"))
    assert c.step_verdict == "noise" and c.step_significant is False
    assert c.explain.get_column("delta_us").abs().max() == 0.0


def test_the_rows_that_explain_the_step_sum_to_its_change() -> None:
    a = gemm_side(GemmSide("matmul", "g1", 400.0), seed=10)
    b = gemm_side(GemmSide("linear", "g2", 100.0), seed=11)
    c = compare(a.profile, b.profile)
    steps_a = [s["dur_ns"] / 1000 for s in a.profile.steps.to_dicts()]
    steps_b = [s["dur_ns"] / 1000 for s in b.profile.steps.to_dicts()]
    change = statistics.median(steps_b) - statistics.median(steps_a)
    assert c.step_after_us - c.step_before_us == pytest.approx(change)
    e = c.explain
    assert e.get_column("delta_us").sum() == pytest.approx(change, abs=1e-6)
    first = e.row(0, named=True)
    assert (first["key"], first["side"]) == (fwd_key(GemmSide("linear", "", 0.0)), "both")
    assert e.get_column("kind").to_list()[-3:] == ["other_matched", "other_one_side", "residual"]
    from opscope.report.compare_render import explain_label

    assert explain_label(first) == first["key"]
    assert explain_label({"kind": "row", "key": "k", "side": "after"}) == "k (only after)"
    assert first["delta_us"] == pytest.approx(
        (sum(b.fwd_kernel_us) - sum(a.fwd_kernel_us)) / 6, abs=1e-3
    )
    # the headline states the change with its noise and verdict, first
    from opscope.report.compare_render import headline, render_markdown

    h = headline(c)
    assert h.startswith("step time") and "noise" in h and "faster" in h
    assert f"**{h}**" in render_markdown(c).splitlines()[2]


def test_summary_labels_say_what_they_cover() -> None:
    # three Linear layers with the same GEMM shape: each module's row holds its own time only
    p = training(steps=4, layers=3)
    c = compare(p.profile, p.profile)
    for i in range(3):
        key = f"Net/Linear_{i} · fwd · GEMM M=8 N=64 K=64 · fp32"
        assert _semantic(c, key)["before_us"] == pytest.approx(p.line_fwd_us[30 + i])
    labels = c.summary.get_column("metric").to_list()
    assert labels[0] == "step time (median of the profiled steps)"
    assert not any("(Linear_" in m for m in labels)  # no "op (one module)" label


def test_epoch_time_from_the_dataloader_length() -> None:
    a = gemm_side(GemmSide("mm", "g", 400.0), seed=12)
    b = gemm_side(GemmSide("mm", "g", 100.0), seed=13)
    c = compare(a.profile, b.profile, steps_per_epoch=1000)
    s = {r["metric"]: r for r in c.summary.to_dicts()}
    row = s["epoch time (1000 steps × median step)"]
    med = statistics.median(x["dur_ns"] for x in a.profile.steps.to_dicts()) / 1000
    from opscope.report.compare_render import summary_cells

    assert row["unit"] == "us" and row["before"] == pytest.approx(med * 1000)
    # 1000 steps × a median of ~943 µs: ~943 ms, written in whole ms above 100 ms
    assert 100 <= med < 1000 and summary_cells(row)[1] == f"{med:.0f} ms"
    assert c.to_json()["steps_per_epoch"] == 1000
    assert not any(m.startswith("epoch") for m in compare(a.profile, b.profile).summary["metric"])


# Significance agrees with the printed noise -------------------------------------------------


def test_a_37_9_ms_change_inside_74_1_ms_of_noise_is_not_significant() -> None:
    before = [100.0] * 6  # ms
    after = [114.34, 114.34, 137.9, 137.9, 161.46, 161.46]  # every step slower, widely spread
    r = step_time_change([x * 1e6 for x in before], [x * 1e6 for x in after])
    assert r["after_us"] - r["before_us"] == pytest.approx(37_900.0)
    # the band: NOISE_K pooled scaled MADs; before's MAD is 0, after's 23.56 ms
    mad_after = statistics.median(abs(x - 137.9) for x in after) * 1.4826
    band = NOISE_K * ((0.0 + mad_after**2) / 2) ** 0.5
    assert band == pytest.approx(74.1, abs=0.05)
    assert r["noise_us"] == pytest.approx(band * 1000)
    assert r["p_value"] < 0.01  # a rank test alone would have called it significant
    assert r["significant"] is False and r["verdict"] == "noise"


def test_significant_means_beyond_the_printed_band() -> None:
    rnd = random.Random(21)
    seen = set()
    for _ in range(300):
        n = rnd.randint(3, 12)
        mu, spread = rnd.uniform(50, 150), rnd.uniform(0.0, 30.0)
        shift = rnd.uniform(-40, 40)
        a = [rnd.gauss(mu, spread) * 1000 for _ in range(n)]
        b = [rnd.gauss(mu + shift, spread) * 1000 for _ in range(rnd.randint(3, 12))]
        r = step_time_change(a, b)
        seen.add(r["verdict"])
        if r["significant"]:
            assert abs(r["after_us"] - r["before_us"]) > r["noise_us"]
        else:
            assert abs(r["after_us"] - r["before_us"]) <= r["noise_us"] or (
                abs(r["after_us"] - r["before_us"]) < 0.02 * max(r["after_us"], r["before_us"])
            )
    assert {"gain", "loss", "noise"} <= seen


# Kineto traces through the CLI ---------------------------------------------------------------


def test_two_single_gemm_traces_on_two_devices(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    r = random.Random(5)
    ka = [round(800 * (1 + r.uniform(-0.01, 0.01)), 3) for _ in range(5)]
    kb = [round(200 * (1 + r.uniform(-0.01, 0.01)), 3) for _ in range(5)]
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    single_gemm_trace(
        a, "mm", m=M, n=N, k=K, kernel="volta_sgemm_128x64_nn", kernel_us=ka, device_name=V100
    )
    single_gemm_trace(
        b,
        "addmm",
        m=M,
        n=N,
        k=K,
        kernel="<script>x</script>",
        kernel_us=kb,
        device_name="NVIDIA <b>A100</b>",
    )
    out = tmp_path / "cmp.html"
    assert main(["compare", str(a), str(b), "--json", "--html", str(out)]) == 0
    j = json.loads(capsys.readouterr().out)
    row = next(x for x in j["rows"] if x["kind"] == "semantic")
    assert row["key"] == f"fwd · GEMM M={M} N={N} K={K} · fp32"
    assert row["speedup"] == pytest.approx(sum(ka) / sum(kb), rel=0.02)
    assert j["warnings"] and "different devices" in j["warnings"][0]
    page = out.read_text()
    assert "<svg" in page and "different devices" in page
    assert "<script>" not in page and "<b>A100" not in page
    assert "&lt;b&gt;A100&lt;/b&gt;" in page
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")


def test_html_to_an_unwritable_path_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = tmp_path / "a.json"
    single_gemm_trace(a, "mm", m=8, n=8, k=8, kernel="k", kernel_us=[5.0] * 3, device_name=V100)
    bad = tmp_path / "missing-dir" / "x.html"
    assert main(["compare", str(a), str(a), "--html", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "x.html" in err
