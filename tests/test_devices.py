"""Device table matching against the deviceProperties of the shared traces."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from conftest import shared_trace
from opscope.analysis.devices import device_key, match, resolve

CASES = [
    ("gpu/tracelens_h100_bert_small.json.gz", "h100-sxm"),
    ("gpu/hta_alexnet_a100_cuda_sync.json.gz", "a100-sxm-40gb"),
    ("gpu/kineto_resnet50_v100_train_2021.pt.trace.json.gz", "v100-sxm2"),
    ("compare/hta_trace_diff_test_v100_rank1of2.json.gz", "v100-sxm2"),
    ("gpu/tracelens_mi300x_resnet_actckpt_rank0of8.json.gz", "mi300x"),
    ("gpu/hta_amd_mi250_minitoy.json.gz", "mi250"),
]


@pytest.mark.parametrize(("rel", "key"), CASES)
def test_shared_trace_devices_match(rel: str, key: str) -> None:
    data = json.loads(gzip.decompress(shared_trace(rel).read_bytes()))
    props = data["deviceProperties"][0]
    spec = match(props["name"], compute_units=props["numSms"], memory_bytes=props["totalGlobalMem"])
    assert spec is not None and spec.key == key
    # the table's SM/CU count agrees with what the device reported
    assert spec.compute_units == props["numSms"]


def test_names_and_unknowns() -> None:
    assert match("NVIDIA A100-SXM4-80GB").key == "a100-sxm-80gb"  # type: ignore[union-attr]
    assert match("NVIDIA A100 80GB PCIe").key == "a100-pcie-80gb"  # type: ignore[union-attr]
    assert match("NVIDIA H100 PCIe").key == "h100-pcie"  # type: ignore[union-attr]
    assert match("NVIDIA H100 NVL").key == "h100-nvl"  # type: ignore[union-attr]
    assert match("NVIDIA H200").key == "h200"  # type: ignore[union-attr]
    assert match("AMD Instinct MI250X").key == "mi250x"  # type: ignore[union-attr]
    assert match("Ascend910B4").key == "ascend910b4"  # type: ignore[union-attr]
    assert match("NVIDIA GeForce GTX 1080") is None
    assert match("AMD Radeon Graphics", compute_units=12) is None
    spec, note = resolve("Some Future GPU", calibration_dir=Path("/nonexistent"))
    assert spec is None and "calibrate" in note
    spec = match("NVIDIA H100 80GB HBM3")
    assert spec is not None
    # dense bf16 is half the datasheet's 1979 TFLOPS with sparsity; V100 has no bf16 peak
    assert spec.peak("bf16", "matrix") == pytest.approx(989.5e12)
    assert match("Tesla V100-SXM2-16GB").peak("bf16", "matrix") is None  # type: ignore[union-attr]
    assert device_key("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
