"""Every rule on a small real model recorded on CPU, and its fixed twin where it must not fire.

Locations are checked against the line of the model's source found by text search, figures
against an independent reading of the raw Chrome trace with the stdlib.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

import torch

from helpers.contract import FINDING_KEYS
from models import rule_models as rm
from models._profile import load, record
from opscope.advise import Findings, advise
from opscope.model import Profile

pytestmark = pytest.mark.torch
MODELS = Path(rm.__file__)
STEPS = 3


def lines_of(text: str) -> set[int]:
    """1-based line of ``text`` in the models file and of the ``def`` enclosing it (Kineto's
    python frames name a function by its first line), found by reading the source."""
    src = MODELS.read_text().splitlines()
    for i, ln in enumerate(src, 1):
        if text in ln:
            indent = len(ln) - len(ln.lstrip())
            for j in range(i - 1, 0, -1):
                prev = src[j - 1]
                if prev.lstrip().startswith("def ") and len(prev) - len(prev.lstrip()) < indent:
                    return {i, j}
            return {i}
    raise AssertionError(text)


# rule id -> (model factory, advise options, the source line the finding must point at)
CASES: dict[str, tuple[Callable[[bool], Any], dict[str, Any], str | None]] = {
    "layout-transpose-copy": (rm.copy_linear, {}, "self.weight.t().contiguous().t()"),
    "fusion-bias-add": (rm.seed_linear, {}, "x = torch.matmul(x, self.weight.t())"),
    "shape-alignment": (rm.alignment, {}, "model(x).float().square().mean().backward()"),
    "fusion-activation": (rm.activation, {}, "return torch.relu(self.fc(x))"),
    "fusion-attention": (rm.attention, {}, "att = torch.softmax("),
    "fusion-optimizer-foreach": (rm.optimizer, {}, "opt.step()"),
    "fusion-ascend-affinity": (rm.rmsnorm, {"target": "ascend"}, "torch.rsqrt("),
    "precision-fp32-matmul": (
        rm.precision,
        {"target": "nvidia", "target_name": "A100"},
        "model(x).float().square().mean().backward()",
    ),
    "overhead-host-sync": (rm.host_sync, {}, "if y.sum().item() > 0:"),
    "overhead-launch-bound": (rm.dispatch, {}, "y = y + x * w"),
    "overhead-dataloader": (rm.dataloader, {}, "b = next(it)"),
    "overhead-ascend-slow-path": (
        rm.float64,
        {"target": "ascend"},
        "model(x).float().square().mean().backward()",
    ),
    "memory-alloc-churn": (rm.churn, {}, "x.mul(1.0001)"),
    "memory-kept-alive": (rm.kept_alive, {}, "y = model(x) * 2"),
}

_cache: dict[tuple[str, bool], tuple[Profile, Path]] = {}


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, bool], tuple[Profile, Path]]:
    torch.set_num_threads(1)
    d = tmp_path_factory.mktemp("rule_traces")

    def get(rule: str, fixed: bool) -> tuple[Profile, Path]:
        key = (rule, fixed)
        if key not in _cache:
            factory = CASES[rule][0]
            path = record(factory(fixed), d / f"{rule}-{fixed}.json", steps=STEPS)
            _cache[key] = (load(path), path)
        return _cache[key]

    return get


def _run(traces: Any, rule: str, fixed: bool) -> tuple[Findings, Path]:
    profile, path = traces(rule, fixed)
    found = advise(profile, CASES[rule][1])
    assert found.errors == {}
    return found, path


@pytest.mark.timing
@pytest.mark.parametrize("rule", sorted(CASES))
def test_rule_fires_on_trigger_model_at_the_users_line(traces: Any, rule: str) -> None:
    found, _ = _run(traces, rule, fixed=False)
    hits = found.by_rule(rule)
    assert hits, f"{rule} did not fire; got {[f.rule for f in found]}"
    want = lines_of(str(CASES[rule][2]))
    assert any(
        f.file is not None and f.file.endswith("models/rule_models.py") and f.line in want
        for f in hits
    ), ([(f.file, f.line) for f in hits], want)
    for f in hits:
        assert f.severity in ("high", "medium", "low")
        assert f.fix and f.saving_how and f.title
        assert f.saving_us >= 0 and f.saving_pct >= 0


TIME_SHARE_TWINS = {"overhead-dataloader"}
"""Twins whose silence is a share of step time that a loaded machine moves: the data-loader
twin's fetch is ~4 % of a 2.5 ms step, so one 0.5 ms preemption inside a fetch crossed the
rule's 10 % (seen in a fresh-clone run). Their real-run check counts work instead
(``test_dataloader_twin_fetch_does_no_per_sample_work``); the rule's verdict on either side of
its threshold is checked on generated steps (``test_dataloader_rule_threshold_...``)."""


@pytest.mark.timing
@pytest.mark.parametrize("rule", sorted(set(CASES) - TIME_SHARE_TWINS))
def test_rule_is_silent_on_fixed_twin(traces: Any, rule: str) -> None:
    found, _ = _run(traces, rule, fixed=True)
    assert found.by_rule(rule) == [], [f.title for f in found.by_rule(rule)]


def _raw(path: Path) -> list[dict[str, Any]]:
    return [e for e in json.loads(path.read_text())["traceEvents"] if e.get("ph") == "X"]


def _steps(path: Path) -> int:
    return sum(1 for e in _raw(path) if str(e.get("name", "")).startswith("ProfilerStep#"))


@pytest.mark.timing
def test_bias_add_saving_is_the_bias_adds_time(traces: Any) -> None:
    found, path = _run(traces, "fusion-bias-add", fixed=False)
    (f,) = found.by_rule("fusion-bias-add")
    adds = [
        e
        for e in _raw(path)
        if e["name"] == "aten::add_" and e["args"].get("Input Dims") == [[64, 128], [128], []]
    ]
    assert len(adds) == STEPS == _steps(path)
    want_us = sum(float(e["dur"]) for e in adds) / STEPS
    assert f.saving_us == pytest.approx(want_us, abs=0.01)
    assert f.evidence["calls"] == STEPS
    assert f.evidence["bench"] == {
        "op": "matmul",
        "m": 64,
        "k": 256,
        "n": 128,
        "dtype": "float32",
        "bias": True,
        "fix": "linear",
    }


@pytest.mark.timing
def test_host_sync_counts_item_calls(traces: Any) -> None:
    found, path = _run(traces, "overhead-host-sync", fixed=False)
    items = [e for e in _raw(path) if e["name"] == "aten::item"]
    assert sum(f.evidence["calls"] for f in found.by_rule("overhead-host-sync")) == len(items)
    assert len(items) == STEPS


@pytest.mark.timing
def test_alignment_evidence_names_the_dim_and_padding(traces: Any) -> None:
    found, _ = _run(traces, "shape-alignment", fixed=False)
    (f,) = found.by_rule("shape-alignment")
    assert f.evidence["figures"]["misaligned_dims"] == [1000]
    assert f.evidence["figures"]["padded"] == {1000: 1024}
    assert f.severity == "low"  # CPU profile: the generic 128 rule, low severity
    assert f.module is not None and "Linear" in f.module


@pytest.mark.timing
def test_alignment_targets_other_devices_with_their_rules(traces: Any) -> None:
    profile, _ = traces("shape-alignment", False)
    nv = advise(profile, target="nvidia").by_rule("shape-alignment")
    assert nv == []  # 1000 is a multiple of 4 (tf32) and 8: fine for tensor cores
    asc = advise(profile, target="ascend").by_rule("shape-alignment")
    assert [f.evidence["figures"]["misaligned_dims"] for f in asc] == [[1000]]


@pytest.mark.timing
def test_dataloader_saving_is_fetch_time(traces: Any) -> None:
    found, path = _run(traces, "overhead-dataloader", fixed=False)
    (f,) = found.by_rule("overhead-dataloader")
    fetch = [
        e
        for e in _raw(path)
        if str(e["name"]).startswith("enumerate(DataLoader)") and e.get("cat") == "user_annotation"
    ]
    want = sum(float(e["dur"]) for e in fetch) / STEPS
    assert f.saving_us == pytest.approx(want, rel=1e-3)


@pytest.mark.timing
def test_foreach_counts_per_parameter_ops(traces: Any) -> None:
    found, _ = _run(traces, "fusion-optimizer-foreach", fixed=False)
    (f,) = found.by_rule("fusion-optimizer-foreach")
    shapes = f.evidence["bench"]["shapes"]
    assert sorted(map(tuple, shapes)) == sorted({(32, 32), (32,)})
    assert f.evidence["bench"]["optimizer"] == "SGD"


@pytest.mark.timing
def test_findings_sorted_by_saving_and_json_keys(traces: Any) -> None:
    found, _ = _run(traces, "fusion-bias-add", fixed=False)
    savings = [f.saving_us for f in found]
    assert savings == sorted(savings, reverse=True)
    for row in found.to_json():
        assert list(row) == FINDING_KEYS


@pytest.mark.timing
def test_backward_matmuls_are_charged_to_the_forward_line(traces: Any) -> None:
    found, path = _run(traces, "shape-alignment", fixed=False)
    (f,) = found.by_rule("shape-alignment")
    # forward addmm [64,256]x[256,1000] and the backward mm that carries the 1000 dim
    calls = [
        e
        for e in _raw(path)
        if e["name"] in ("aten::addmm", "aten::mm")
        and any(1000 in d for d in e["args"].get("Input Dims", []) if isinstance(d, list))
    ]
    engine = [e for e in _raw(path) if e["name"].startswith("autograd::engine::evaluate_function")]
    backward = [
        e
        for e in calls
        if any(
            g["tid"] == e["tid"]
            and float(g["ts"]) <= float(e["ts"]) <= float(g["ts"]) + float(g["dur"])
            for g in engine
        )
    ]
    assert len(backward) == STEPS  # the weight grad (x needs no grad)
    assert f.evidence["calls"] == len(calls) == 2 * STEPS


@pytest.mark.timing
def test_attention_saving_is_scale_and_softmax_time(traces: Any) -> None:
    found, path = _run(traces, "fusion-attention", fixed=False)
    (f,) = found.by_rule("fusion-attention")
    # forward ops (they carry a sequence number) between the two matmuls: the scale and softmax
    mid = [
        e
        for e in _raw(path)
        if "Sequence number" in e["args"]
        and (
            (e["name"] == "aten::mul" and e["args"]["Input Dims"] == [[4, 4, 32, 32], []])
            or e["name"] == "aten::softmax"
        )
    ]
    assert len(mid) == 2 * STEPS
    assert f.saving_us == pytest.approx(sum(float(e["dur"]) for e in mid) / STEPS, abs=0.01)
    assert f.evidence["bench"]["shape"] == [4, 4, 32, 16]


def _fetch_ops(path: Path) -> list[list[str]]:
    """Per data-loader fetch range of a raw trace: the cpu_op names recorded inside it."""
    raw = _raw(path)
    fetches = [
        e
        for e in raw
        if str(e["name"]).startswith("enumerate(DataLoader)") and e.get("cat") == "user_annotation"
    ]
    ops = [e for e in raw if e.get("cat") == "cpu_op"]
    return [[o["name"] for o in ops if f["ts"] <= o["ts"] < f["ts"] + f["dur"]] for f in fetches]


@pytest.mark.timing
def test_dataloader_twin_fetch_does_no_per_sample_work(traces: Any) -> None:
    """Work counts, which the machine's speed cannot change: the trigger's fetch runs each
    sample's transform (randn and SAMPLE_PASSES matmuls per sample, 16 samples), the fixed
    twin's one indexing op per batch and no matmul."""
    _, slow = traces("overhead-dataloader", False)
    _, fixed = traces("overhead-dataloader", True)
    per_slow, per_fixed = _fetch_ops(slow), _fetch_ops(fixed)
    assert len(per_slow) == len(per_fixed) == STEPS
    for names in per_slow:
        assert names.count("aten::randn") == 16
        assert names.count("aten::matmul") == 16 * rm.SAMPLE_PASSES
    for names in per_fixed:
        assert "aten::matmul" not in names and "aten::randn" not in names
        assert names.count("aten::index") == 1
        assert len(names) * 20 < len(per_slow[0])


@pytest.mark.parametrize(("fetch_us", "fires"), [(900.0, False), (1000.0, True), (1100.0, True)])
def test_dataloader_rule_threshold_on_generated_steps(fetch_us: float, fires: bool) -> None:
    """Four 10 ms steps whose data-loader fetch takes ``fetch_us``: 9 % is silent; 10 % and
    11 % fire (the documented threshold: >= 10 % of step time), saving the fetch time per
    step."""
    from helpers.synth import Builder

    b = Builder()
    for s in range(4):
        t = s * 10_000.0
        st = b.step(s, t, 10_000)
        name = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
        b.op(name, t, fetch_us, parent=st, step=s)
        b.op("aten::mm", t + fetch_us + 10, 5000, parent=st, step=s)
    found = advise(b.build()).by_rule("overhead-dataloader")
    if not fires:
        assert found == []
    else:
        (f,) = found
        assert f.saving_us == pytest.approx(fetch_us)
        assert f.evidence["figures"]["fetch_us_per_step"] == pytest.approx(fetch_us)
