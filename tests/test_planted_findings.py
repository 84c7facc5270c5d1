"""Planted-issue traces (tests/helpers/planted.py): each planted class is the top device-side
finding with a saving within 2x of the planted gap; a clean trace gives nothing above 1% of the
step. Run on an H100 trace with device properties and on an MI300X-like trace without them,
read with the device named as ``--device MI300X`` would."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import opscope
from helpers import planted
from opscope.advise import advise

HOST_SIDE = ("overhead-", "comm-")
PLANTED = [c for c in planted.CASES if c != "clean"]


# The device each run is read as: the H100 trace carries its device properties, the others are
# read with the device named (what `--device MI300X` does).
NAMED = {"h100": None, "mi300x": "MI300X", "ascend910b2": "ascend910b2"}


def _run(case: str, tmp_path: Path, device: str) -> tuple[list, dict]:
    path, _ = planted.write(case, tmp_path, device=device)
    # the truth is read back from the file written beside the trace
    truth = json.loads(path.with_name(path.name.replace(".json", ".truth.json")).read_text())
    results = {"target_name": NAMED[device]} if NAMED[device] else {}
    found = advise(opscope.load(path), results)
    assert found.errors == {}
    return list(found), truth


@pytest.mark.parametrize("device", planted.DEVICES)
@pytest.mark.parametrize("case", PLANTED)
def test_planted_class_is_top_with_saving_near_the_gap(
    case: str, device: str, tmp_path: Path
) -> None:
    if case == "gemm-few-tiles" and device == "ascend910b2":
        pytest.skip("24 cube cores: a GEMM with < 12 tiles of 128x128 is memory-bound")
    found, truth = _run(case, tmp_path, device)
    if truth["rule"].startswith(HOST_SIDE):
        ranked = found
    else:
        ranked = [f for f in found if not f.rule.startswith(HOST_SIDE)]
    assert ranked, f"{case}: no finding"
    top = ranked[0]
    assert top.rule == truth["rule"], [(f.rule, f.saving_us) for f in ranked[:4]]
    assert truth["gap_us"] > 0
    assert truth["gap_us"] / 2 <= top.saving_us <= truth["gap_us"] * 2, (top.saving_us, truth)
    # the clean GEMM in the same trace is an aligned peer: alignment may use its rate
    assert top.saving_method in ("bound-gap", "device-idle", "peer-rate")
    assert top.saving_limit_us is not None and top.saving_us <= top.saving_limit_us + 1e-6


@pytest.mark.parametrize("device", planted.DEVICES)
def test_clean_trace_has_nothing_above_one_percent(device: str, tmp_path: Path) -> None:
    found, truth = _run("clean", tmp_path, device)
    assert truth["rule"] is None
    assert [f for f in found if f.saving_pct > 1.0] == []


def test_sync_saving_is_the_idle_not_the_host_wait(tmp_path: Path) -> None:
    path, _ = planted.write("sync", tmp_path)
    doc = json.loads(path.read_text())
    wait_us = sum(e["dur"] for e in doc["traceEvents"] if e["name"] == "cudaDeviceSynchronize")
    steps = sum(1 for e in doc["traceEvents"] if e["name"].startswith("ProfilerStep#"))
    found = advise(opscope.load(path))
    (sync,) = found.by_rule("overhead-host-sync")
    assert sync.evidence["figures"]["host_wait_us_per_step"] == pytest.approx(wait_us / steps)
    # the host waited on a GEMM that removing the sync would not make faster
    assert sync.saving_us < 0.05 * wait_us / steps


def test_alignment_saving_from_the_bound_without_peers(tmp_path: Path) -> None:
    """4097³ bf16 alone (no aligned GEMM to compare with): the saving comes from the bound."""
    path, truth = planted.write("misaligned", tmp_path, clean_work=False)
    (f,) = advise(opscope.load(path)).by_rule("shape-alignment")
    assert f.saving_method == "bound-gap"
    assert truth.gap_us / 2 <= f.saving_us <= truth.gap_us * 2


def test_report_device_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``opscope report --device MI300X`` on a trace without device properties: the planted
    GEMM is found from MI300X peaks; an unknown name is a one-line error, exit 2."""
    from opscope.cli.app import main

    path, truth = planted.write("tall-skinny", tmp_path, device_props=False)
    assert main(["report", str(path), "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert not [f for f in plain["findings"] if f["rule"] == "gemm-memory-bound"]
    assert main(["report", str(path), "--json", "--device", "MI300X"]) == 0
    named = json.loads(capsys.readouterr().out)
    (f,) = [f for f in named["findings"] if f["rule"] == "gemm-memory-bound"]
    assert truth.gap_us / 2 <= f["saving_us"] <= truth.gap_us * 2
    assert main(["report", str(path), "--device", "TPUv9"]) == 2
    err = capsys.readouterr().err
    assert "unknown device 'TPUv9'" in err and "Traceback" not in err


def test_attention_found_across_many_pass_through_ops_and_claimed_once(tmp_path: Path) -> None:
    """HF-style attention with 12 view/reshape ops on each side of the softmax and the dropout
    in a child module: one finding for all calls; the softmax and the matmuls inside the span
    are not claimed again by the bandwidth / GEMM / alignment rules."""
    path, truth = planted.write("attention", tmp_path, extra_views=12)
    doc = json.loads(path.read_text())
    n_softmax = sum(1 for e in doc["traceEvents"] if e["name"] == "aten::softmax")
    found = advise(opscope.load(path))
    (f,) = found.by_rule("fusion-attention")
    assert f.evidence["calls"] == n_softmax
    assert f.evidence["figures"]["ops_between"] >= 2 * 12
    assert truth.gap_us / 2 <= f.saving_us <= truth.gap_us * 2
    others = ("elementwise-bandwidth", "gemm-memory-bound", "gemm-tiles", "shape-alignment")
    assert [g.rule for g in found if g.rule in others] == []
