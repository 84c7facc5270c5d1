"""Attribution: planted slow lines and backward kernels are charged to the right user line."""

from __future__ import annotations

import polars as pl

import opscope.analysis  # noqa: F401
from helpers.synth import USER_FILE, training
from opscope.analysis.registry import run


def _by_line(res: object) -> dict[int, tuple[float, float]]:
    lines = res.lines  # type: ignore[attr-defined]
    return {
        r["line"]: (r["fwd_ns"] / 1000, r["bwd_ns"] / 1000)
        for r in lines.filter(pl.col("file") == USER_FILE).iter_rows(named=True)
    }


def test_device_kernels_forward_and_backward_charged_to_forward_line() -> None:
    plan = training(steps=3, layers=3, slow_at=(1, 2), slow_factor=20)
    got = _by_line(run("attribution", plan.profile))
    assert set(got) == set(plan.line_fwd_us)
    for line in plan.line_fwd_us:
        assert got[line] == (plan.line_fwd_us[line], plan.line_bwd_us[line])
    # the planted slow line is the top row
    top = run("attribution", plan.profile).lines.row(0, named=True)  # type: ignore[attr-defined]
    assert top["line"] == 32 and top["module"] == "Net/Linear_2"
    assert top["kernels"] == 6  # 3 steps x (1 forward + 1 backward kernel)


def test_host_only_profile_charges_top_level_ops_once() -> None:
    plan = training(steps=2, layers=2, device=False)
    res = run("attribution", plan.profile)
    got = _by_line(res)
    for line in plan.line_fwd_us:
        assert got[line] == (plan.line_fwd_us[line], plan.line_bwd_us[line])
    # nested ops (addmm in linear, mm in the backward node) are not counted twice
    ops = plan.profile.ops
    top_level = ops.filter(
        pl.col("name").is_in(
            ["aten::linear", "autograd::engine::evaluate_function: AddmmBackward0"]
        )
    )
    total = res.lines.get_column("total_ns").sum()  # type: ignore[attr-defined]
    assert total == top_level.get_column("dur_ns").sum()
