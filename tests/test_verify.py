"""Verification writes measured speedups back into findings, and says when a fix is not faster."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

pytest.importorskip("torch")

import torch

from models import rule_models as rm
from models._profile import record
from opscope.advise import advise
from opscope.advise.finding import Finding, finding_id
from opscope.advise.rule import Findings
from opscope.advise.verify import verify, verify_finding
from opscope.cli.app import main

pytestmark = pytest.mark.torch


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def _finding(bench: dict[str, object] | None) -> Finding:
    ev: dict[str, object] = {"bench": bench} if bench else {}
    return Finding(
        id=finding_id("r", "f.py", 1, None, "k"), rule="r", severity="low", title="t", evidence=ev
    )


def test_measured_speedup_is_written_back() -> None:
    f = _finding(
        {
            "op": "matmul",
            "m": 64,
            "k": 96,
            "n": 32,
            "dtype": "float32",
            "bias": True,
            "transposed_b": True,
            "fix": "linear",
        }
    )
    v = verify_finding(f, "cpu", budget_s=0.3)
    assert f.verified_speedup is None and f.verification is None  # the input is unchanged
    assert v.verified_speedup is not None and math.isfinite(v.verified_speedup)
    assert v.verified_speedup > 0
    ver = v.verification or {}
    assert ver["status"] == "measured" and ver["device"] == "cpu"
    assert ver["speedup"] == pytest.approx(ver["original_us"] / ver["fix_us"])
    assert v.verified_speedup == ver["speedup"]
    assert ver["repeats"] >= 7
    word = "faster on cpu" if ver["faster"] else "not faster on this device"
    assert word in ver["summary"]


def test_identical_fix_says_not_faster() -> None:
    f = _finding({"op": "matmul", "m": 48, "k": 48, "n": 48, "dtype": "float32", "fix": "identity"})
    v = verify_finding(f, "cpu", budget_s=0.3)
    ver = v.verification or {}
    assert ver["faster"] is False
    assert ver["summary"].startswith(f"not faster on this device: {ver['speedup']:.2f}×")


def test_attention_and_optimizer_benches() -> None:
    att = verify_finding(
        _finding(
            {
                "op": "attention",
                "shape": [2, 2, 16, 8],
                "kv_len": 16,
                "dtype": "float32",
                "fix": "sdpa",
            }
        ),
        "cpu",
        0.2,
    )
    opt = verify_finding(
        _finding(
            {
                "op": "optimizer",
                "optimizer": "SGD",
                "shapes": [[16, 16], [16]] * 4,
                "dtype": "float32",
                "fix": "foreach",
            }
        ),
        "cpu",
        0.2,
    )
    for v in (att, opt):
        assert v.verified_speedup is not None and v.verified_speedup > 0


def test_unmeasurable_and_too_large_claim_nothing() -> None:
    v = verify_finding(_finding(None), "cpu")
    assert v.verified_speedup is None
    assert (v.verification or {})["status"] == "not measurable"
    big = verify_finding(
        _finding(
            {"op": "matmul", "m": 81920, "k": 4096, "n": 8192, "dtype": "float32", "fix": "padded"}
        ),
        "cpu",
    )
    assert big.verified_speedup is None
    assert (big.verification or {})["status"] == "skipped"


def test_verify_profile_findings_and_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import opscope

    trace = record(rm.seed_linear(False), tmp_path / "seed.json", steps=2)
    found = advise(opscope.load(trace))
    bias = found.by_rule("fusion-bias-add")[0]
    out = verify(None, found, device="cpu", budget_s=0.5, only=[bias.id])
    assert isinstance(out, Findings) and len(out) == len(found)
    got = out.get(bias.id)
    assert got is not None and got.verified_speedup is not None and got.verified_speedup > 0
    others = [f for f in out if f.id != bias.id]
    assert all(f.verified_speedup is None for f in others)
    rc = main(
        [
            "verify",
            str(trace),
            "--finding",
            bias.id[:8],
            "--device",
            "cpu",
            "--budget",
            "0.3",
            "--json",
        ]
    )
    assert rc == 0
    js = json.loads(capsys.readouterr().out)
    (row,) = js["findings"]
    assert row["id"] == bias.id and row["verified_speedup"] > 0
    assert row["verification"]["m"] == 64 and row["verification"]["n"] == 128


def test_cli_verify_unknown_finding_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = record(rm.seed_linear(True), tmp_path / "fixed.json", steps=1)
    rc = main(["verify", str(trace), "--finding", "deadbeef", "--device", "cpu"])
    assert rc == 2
    assert "no finding with id deadbeef" in capsys.readouterr().err


def test_cli_verify_bad_target_and_missing_path_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = record(rm.seed_linear(True), tmp_path / "t.json", steps=1)
    assert main(["verify", str(trace), "--target", "tpu", "--device", "cpu"]) == 2
    assert "unknown target device 'tpu'" in capsys.readouterr().err
    assert main(["verify", str(tmp_path / "nope.json")]) == 2
    assert "Traceback" not in capsys.readouterr().err
