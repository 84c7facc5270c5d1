"""Planted Ascend profiler outputs (tests/helpers/planted_ascend.py), read by the Ascend reader
with the device named (``--device ascend910b2``): each planted class is the top finding of its
kind with a saving within 2x of the planted gap; the clean output gives nothing above 1% of
the step. Then the Ascend rules on the real AlexNet exports, checked against plain-Python
counts over the raw files."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

import opscope
from conftest import shared_trace
from helpers import planted, planted_ascend
from opscope.advise import advise

# optimizer-loop: fusion-optimizer-foreach estimates no saving from the profile (its own test)
PLANTED = [c for c in planted_ascend.CASES if c not in ("clean", "optimizer-loop")]
# The classes whose fix is on the host or the network: ranked among every finding. Another
# rule may describe the same events under a different fix; those are named here and checked
# for consistency instead (the planted class keeps its saving, theirs is what is left: see
# advise/overlap.py's part_of).
HOST_SIDE = ("overhead-", "comm-", "ascend-comm-", "ascend-dynamic-shape")
SAME_EVENTS = {
    # the whole exposed collective (fix: overlap it), of which alignment removes a part
    "ascend-comm-byte-alignment": "comm-exposed",
    # the same: bucketing the small collectives removes a part of their exposed time
    "ascend-comm-packet": "comm-exposed",
    # the compile calls' host time (fix: the same), not bounded by the device idle
    "ascend-dynamic-shape": "overhead-recompile",
}
NAMED = {"target_name": planted_ascend.DEVICE}


def _run(case: str, tmp_path: Path, results: dict | None = None) -> tuple[list, dict, Path]:
    root, _ = planted_ascend.write(case, tmp_path)
    truth = json.loads((tmp_path / f"{case}.truth.json").read_text())
    found = advise(opscope.load(root), NAMED if results is None else results)
    assert found.errors == {}
    return list(found), truth, root


@pytest.mark.parametrize("case", PLANTED)
def test_planted_class_is_top_with_saving_near_the_gap(case: str, tmp_path: Path) -> None:
    found, truth, _ = _run(case, tmp_path)
    rule = truth["rule"]
    other = SAME_EVENTS.get(rule)
    if rule.startswith(HOST_SIDE):
        ranked = [f for f in found if f.rule != other]
    else:
        ranked = [f for f in found if not f.rule.startswith(HOST_SIDE)]
    assert ranked, f"{case}: no finding"
    top = ranked[0]
    assert top.rule == rule, [(f.rule, f.saving_us) for f in ranked[:4]]
    assert truth["gap_us"] > 0
    assert truth["gap_us"] / 2 <= top.saving_us <= truth["gap_us"] * 2, (top.saving_us, truth)
    assert top.saving_method in ("bound-gap", "device-idle", "peer-rate")
    assert top.saving_limit_us is not None and top.saving_us <= top.saving_limit_us + 1e-6
    assert "torch_npu" in top.fix or rule.startswith("ascend-comm-")
    if other is not None:
        (same,) = [f for f in found if f.rule == other]
        assert same.evidence["overlaps"] == [top.id]
        assert top.saving_us + same.saving_us <= same.saving_limit_us + 1e-6


def _claimed_time_us(case: str, root: Path, steps: int) -> float:
    """The time, per step, of the events the overlapping findings of ``case`` explain, from the
    raw files: the slow add + layer_norm (or mul, add, relu) kernels, the exposed all-reduces
    (nothing runs beside them), the compile calls."""
    if case.endswith("-slow-add-layer-norm") or case == "fusible-slow-sequence":
        x, types = (
            ("16,2048,4096", ["Add", "LayerNormV3"])
            if case.startswith("affinity")
            else ("8192,2048", ["Add", "Muls", "Relu"])
        )
        rows = [r for r in _kernel_rows(root) if r["Input Shapes"].startswith(x)]
        assert sorted({r["Type"] for r in rows}) == types
        return sum(float(r["Duration(us)"]) for r in rows) / steps
    events = json.loads((root / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").read_text())
    want = "hcom_" if case.startswith("comm-") else "AscendCL@aclopCompileAndExecute"
    durs = [e["dur"] for e in events if e.get("ph") == "X" and e["name"].startswith(want)]
    assert len(durs) == steps * (11 if case == "comm-packet" else 1)
    return sum(durs) / steps


OVERLAPPING = {
    "affinity-slow-add-layer-norm": ("ascend-affinity-api", "elementwise-bandwidth"),
    "comm-alignment": ("ascend-comm-byte-alignment", "comm-exposed"),
    "comm-packet": ("ascend-comm-packet", "comm-exposed"),
    "dynamic-shape": ("ascend-dynamic-shape", "overhead-recompile"),
    "fusible-slow-sequence": ("ascend-fusible-sequence", "elementwise-bandwidth"),
}


@pytest.mark.parametrize("case", sorted(OVERLAPPING))
def test_overlapping_findings_count_the_same_time_once(case: str, tmp_path: Path) -> None:
    """Two rules explain the same events: their savings sum to at most those events' time
    (from the raw files), the Ascend finding keeps its saving, the other names it."""
    found, truth, root = _run(case, tmp_path)
    mine, other = OVERLAPPING[case]
    (a,) = [f for f in found if f.rule == mine]
    others = [f for f in found if f.rule == other]
    assert others, [f.rule for f in found]
    claimed = _claimed_time_us(case, root, 3)
    assert a.saving_us + sum(f.saving_us for f in others) <= claimed + 1e-3
    # before the overlap was resolved the two sums passed the events' time
    before = sum(f.evidence.get("saving_before_overlap_us", f.saving_us) for f in others)
    assert a.saving_us + before > claimed
    for f in others:
        assert f.evidence["overlaps"] == [a.id]
        assert f"finding {a.id} ({mine})" in f.saving_how
    assert truth["gap_us"] / 2 <= a.saving_us <= truth["gap_us"] * 2


def test_clean_output_has_nothing_above_one_percent(tmp_path: Path) -> None:
    found, truth, _ = _run("clean", tmp_path)
    assert truth["rule"] is None
    assert [(f.rule, f.saving_pct) for f in found if f.saving_pct > 1.0] == []


def _kernel_rows(root: Path) -> list[dict[str, str]]:
    with (root / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv").open() as f:
        return list(csv.DictReader(f))


def test_affinity_without_peaks_keeps_the_costliest_op(tmp_path: Path) -> None:
    """No device named: the saving is the rotary ops' kernel time less the costliest kernel of
    each match, computed here from kernel_details.csv."""
    found, _, root = _run("affinity-rotary", tmp_path, results={"target": "ascend"})
    (f,) = [f for f in found if f.rule == "ascend-affinity-api"]
    assert f.saving_method == "removed-time"
    rows = _kernel_rows(root)
    steps = sorted({r["Step Id"] for r in rows})
    saving = 0.0
    for s in steps:
        # the rotary's kernels: every kernel of the step but the clean MatMul and Add (first two)
        durs = [float(r["Duration(us)"]) for r in rows if r["Step Id"] == s][2:]
        assert len(durs) == 5  # mul, neg, cat, mul, add (the slices launch none)
        saving += sum(durs) - max(durs)
    assert f.saving_us == pytest.approx(saving / len(steps), abs=1e-3)
    assert f.evidence["operators"] == [
        "aten::mul", "aten::slice", "aten::slice", "aten::neg", "aten::cat", "aten::mul",
        "aten::add",
    ]  # fmt: skip
    assert f.line == 64 and f.file == "/work/model/llama.py"


def test_affinity_only_for_an_ascend_target(tmp_path: Path) -> None:
    found, _, _ = _run("affinity-add-layer-norm", tmp_path, results={"target": "nvidia"})
    assert [f for f in found if f.rule.startswith("ascend-")] == []


def test_affinity_leaves_attention_spans_to_fusion_attention(tmp_path: Path) -> None:
    """The scale -> mask -> softmax of a materialised attention is fusion-attention's."""
    path, _ = planted.write("attention", tmp_path, device="ascend910b2")
    found = advise(opscope.load(path), {"target_name": "ascend910b2"})
    assert found.by_rule("fusion-attention")
    assert found.by_rule("ascend-affinity-api") == []


def test_alignment_without_aligned_peers_is_unknown(tmp_path: Path) -> None:
    root, _ = planted_ascend.write("comm-alignment", tmp_path)
    tv = root / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    events = json.loads(tv.read_text())
    for e in events:  # every off-chip transfer one byte off 512
        if e.get("name") == "Memcpy" and e["args"]["size(Byte)"] % 512 == 0:
            e["args"]["size(Byte)"] += 1
    tv.write_text(json.dumps(events))
    (f,) = advise(opscope.load(root), NAMED).by_rule("ascend-comm-byte-alignment")
    assert f.saving_method == "unknown" and f.saving_us == 0.0 and f.severity == "low"
    assert f.evidence["figures"]["unaligned_tasks"] == 3 * 4 * 4  # steps x planes x tasks
    assert f.evidence["figures"]["unaligned_share_of_sdma_time"] == 1.0


def test_packet_counts_the_small_collectives(tmp_path: Path) -> None:
    """30 of 33 collectives under 16 MB; the saving is their time above their bytes at the
    large collectives' rate, computed here from trace_view.json."""
    found, _, root = _run("comm-packet", tmp_path)
    (f,) = [f for f in found if f.rule == "ascend-comm-packet"]
    events = json.loads((root / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").read_text())
    colls = [e for e in events if e.get("ph") == "X" and e["name"].startswith("hcom_")]
    sizes = []
    for cl in colls:  # the HCCS tasks inside the collective's time
        a, b = float(cl["ts"]), float(cl["ts"]) + cl["dur"]
        sizes.append(
            sum(
                e["args"]["size(Byte)"]
                for e in events
                if e.get("ph") == "X"
                and e["name"] == "Memcpy"
                and e["args"]["link type"] == "HCCS"
                and a <= float(e["ts"]) < b
            )
        )
    small = [(cl, n) for cl, n in zip(colls, sizes, strict=True) if n < 16_000_000]
    large = [(cl, n) for cl, n in zip(colls, sizes, strict=True) if n >= 16_000_000]
    assert (len(small), len(large)) == (30, 3)
    assert f.evidence["figures"]["small_collectives"] == 30
    assert f.evidence["figures"]["collectives"] == 33
    rate = sum(n for _, n in large) / sum(cl["dur"] for cl, _ in large)  # bytes per µs
    want = sum(cl["dur"] - n / rate for cl, n in small) / 3
    assert f.saving_us == pytest.approx(want, rel=1e-4)
    assert f.saving_method == "peer-rate"


def test_packet_without_large_collectives_is_unknown(tmp_path: Path) -> None:
    root, _ = planted_ascend.write("comm-packet", tmp_path)
    tv = root / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    events = json.loads(tv.read_text())
    for e in events:  # the large all-reduce's transfers shrunk to 1 MiB as well
        if e.get("name") == "Memcpy" and e["args"]["size(Byte)"] > 1024 * 1024:
            e["args"]["size(Byte)"] = 256 * 1024
    tv.write_text(json.dumps(events))
    (f,) = advise(opscope.load(root), NAMED).by_rule("ascend-comm-packet")
    assert f.saving_method == "unknown" and f.saving_us == 0.0 and f.severity == "low"
    assert f.evidence["figures"]["small_collectives"] == 33


def test_optimizer_loop_gets_the_torch_npu_fused_optimizer(tmp_path: Path) -> None:
    """AdamW one tensor at a time on Ascend: fusion-optimizer-foreach names
    torch_npu.optim.NpuFusedAdamW (msprof-analyze's advice), the portable foreach fix on
    another target; the fusible run of its per-parameter kernels names the same fix."""
    found, _, root = _run("optimizer-loop", tmp_path)
    (f,) = [f for f in found if f.rule == "fusion-optimizer-foreach"]
    assert f.fix.startswith("opt = torch_npu.optim.NpuFusedAdamW(model.parameters()")
    assert "foreach=True" in f.fix
    assert f.evidence["calls"] == 16 * 3 * 3  # parameters x ops x steps
    (run,) = [f for f in found if f.rule == "ascend-fusible-sequence"]
    assert run.evidence["operators"] == ["Muls", "Add", "Addcdiv"]
    assert run.evidence["calls"] == 16 * 3  # per parameter, over the three steps
    assert "torch_npu.optim.NpuFusedAdamW" in run.fix
    other = advise(opscope.load(root), {"target": "nvidia"}).by_rule("fusion-optimizer-foreach")
    assert [g.fix for g in other] == [
        "opt = torch.optim.AdamW(model.parameters(), lr=lr, foreach=True)  # or fused=True on CUDA"
    ]


def test_host_bound_run_saving_is_the_idle_inside_the_runs(tmp_path: Path) -> None:
    """msprof-analyze's host-bound half: the run's kernels busy under 40% of its wall time; the
    saving is the idle between its kernels, computed here from kernel_details.csv; the device
    idle finding keeps the rest and names it."""
    found, _, root = _run("fusible-host-bound", tmp_path)
    (f,) = [f for f in found if f.rule == "ascend-fusible-sequence"]
    assert f.saving_method == "device-idle"
    assert f.evidence["operators"] == ["Muls", "Add", "Relu"]
    rows = [r for r in _kernel_rows(root) if r["Input Shapes"] == "256,256"]
    assert len(rows) == 3 * 8 * 3  # steps x occurrences x kernels
    idle = 0.0
    for i in range(0, len(rows), 3):
        run = rows[i : i + 3]
        assert [r["Type"] for r in run] == ["Muls", "Add", "Relu"]
        t0 = float(run[0]["Start Time(us)"])
        t1 = float(run[-1]["Start Time(us)"]) + float(run[-1]["Duration(us)"])
        busy = sum(float(r["Duration(us)"]) for r in run)
        assert busy / (t1 - t0) < 0.4
        idle += t1 - t0 - busy
    assert f.saving_us == pytest.approx(idle / 3, abs=1e-3)
    assert f.evidence["calls"] == 24
    (idle_f,) = [g for g in found if g.rule == "overhead-device-idle"]
    assert idle_f.evidence["overlaps"] == [f.id]


@pytest.mark.parametrize(("small_bytes", "fires"), [(1024 * 1024, False), (512 * 1024, True)])
def test_packet_over_rdma_uses_msprofs_1_mb(tmp_path: Path, small_bytes: int, fires: bool) -> None:
    """The same collectives over RDMA: 1 MiB collectives are not small (msprof-analyze's RDMA
    size is 1 MB), 512 KiB ones are."""
    root, _ = planted_ascend.write("comm-packet", tmp_path)
    tv = root / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    events = json.loads(tv.read_text())
    for e in events:
        a = e.get("args") or {}
        if e.get("name") == "Memcpy":
            a["transport type"], a["link type"] = "RDMA", "ROCE"
            if a["size(Byte)"] == 1024 * 1024 // 4:  # a small collective's plane share
                a["size(Byte)"] = small_bytes // 4
    tv.write_text(json.dumps(events))
    found = advise(opscope.load(root), NAMED).by_rule("ascend-comm-packet")
    if not fires:
        assert found == []
        return
    (f,) = found
    assert "RDMA" in f.title and f.evidence["figures"]["min_bytes"] == 1_000_000
    assert f.evidence["figures"]["small_collectives"] == 30


def test_dynamic_shape_names_the_op_and_its_shapes(tmp_path: Path) -> None:
    found, _, root = _run("dynamic-shape", tmp_path)
    (f,) = [f for f in found if f.rule == "ascend-dynamic-shape"]
    assert f.evidence["operators"][0] == "MatMulV2"
    assert f.evidence["calls"] == 3
    want = {
        r["Input Shapes"]
        for r in _kernel_rows(root)
        if r["Type"] == "MatMulV2" and not r["Input Shapes"].startswith("4096")
    }
    assert len(want) == 3
    got = {";".join(",".join(map(str, s)) for s in json.loads(d)) for d in f.evidence["shapes"]}
    assert got == want
    assert f.line == 101  # the matmul that issued the compiled kernel, not the compile thread


# Real Ascend exports ---------------------------------------------------------------------------

REAL = [
    "ascend/alexnet_ddp_910b/level1_rank0_ascend_pt",
    "ascend/alexnet_ddp_910b/level1_rank1_ascend_pt",
]


def _trace(rel: str) -> list[dict]:
    path = shared_trace(rel) / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    data = json.loads(path.read_text())
    return data if isinstance(data, list) else data["traceEvents"]


@pytest.mark.parametrize("rel", REAL)
def test_real_alignment_counts_the_raw_unaligned_tasks(rel: str) -> None:
    trace = _trace(rel)
    hccl = {
        e["pid"]
        for e in trace
        if e.get("ph") == "M" and e.get("name") == "process_name" and e["args"]["name"] == "HCCL"
    }
    bad = [
        e["args"]["size(Byte)"]
        for e in trace
        if e.get("ph") == "X"
        and e["pid"] in hccl
        and e["name"] in ("Memcpy", "Reduce_Inline")
        and e["args"].get("transport type") == "SDMA"
        and e["args"].get("link type") != "ON_CHIP"
        and e["args"]["size(Byte)"] > 512
        and e["args"]["size(Byte)"] % 512
    ]
    assert bad  # the last chunk of a split all-reduce
    found = advise(opscope.load(shared_trace(rel)))
    (f,) = found.by_rule("ascend-comm-byte-alignment")
    assert f.evidence["figures"]["unaligned_tasks"] == len(bad)
    assert f.evidence["figures"]["unaligned_sizes_bytes"] == sorted(set(bad))
    assert f.saving_method == "peer-rate"
    assert 0 <= f.saving_us <= f.saving_limit_us
    # msprof-analyze's own figure: the unaligned tasks are a low share (< 20%) of SDMA time
    assert f.evidence["figures"]["unaligned_share_of_sdma_time"] < 0.2


@pytest.mark.parametrize("rel", REAL)
def test_real_exposed_communication_is_counted_once(rel: str) -> None:
    """comm-exposed and ascend-comm-byte-alignment on the same collectives sum to the exposed
    communication msprof writes in step_trace_time.csv (Communication(Not Overlapped));
    overhead-recompile and ascend-dynamic-shape to the compile calls' time in trace_view."""
    out = shared_trace(rel) / "ASCEND_PROFILER_OUTPUT"
    with (out / "step_trace_time.csv").open() as f:
        st = list(csv.DictReader(f))
    exposed = sum(float(r["Communication(Not Overlapped)"]) for r in st) / len(st)
    found = advise(opscope.load(shared_trace(rel)))
    (ce,) = [f for f in found.by_rule("comm-exposed") if f.title.startswith("exposed")]
    (al,) = found.by_rule("ascend-comm-byte-alignment")
    assert ce.evidence["overlaps"] == [al.id]
    assert al.saving_us > 0 and ce.saving_us + al.saving_us == pytest.approx(exposed, abs=0.01)
    compile_us = sum(
        e["dur"] for e in _trace(rel) if e.get("name") == "AscendCL@aclopCompileAndExecute"
    ) / len(st)
    (rc,) = found.by_rule("overhead-recompile")
    dyn = found.by_rule("ascend-dynamic-shape")
    assert set(rc.evidence["overlaps"]) == {f.id for f in dyn}
    assert rc.saving_us + sum(f.saving_us for f in dyn) == pytest.approx(compile_us, abs=0.01)


@pytest.mark.parametrize("rel", REAL)
def test_real_dynamic_shape_counts_compiles_per_op_type(rel: str) -> None:
    trace = _trace(rel)
    x = [e for e in trace if e.get("ph") == "X"]
    deq = [e for e in x if e["name"].startswith("Dequeue@")]
    calls = [e for e in x if e["name"] == "AscendCL@aclopCompileAndExecute"]
    want: dict[str, int] = {}
    compile_us: dict[str, float] = {}
    for e in calls:  # the Dequeue@<type> slice on the same thread holding the call
        ts = float(e["ts"])
        (d,) = [
            d
            for d in deq
            if d["tid"] == e["tid"] and float(d["ts"]) <= ts < float(d["ts"]) + d["dur"]
        ]
        t = d["name"].removeprefix("Dequeue@")
        want[t] = want.get(t, 0) + 1
        compile_us[t] = compile_us.get(t, 0.0) + e["dur"]
    found = advise(opscope.load(shared_trace(rel))).by_rule("ascend-dynamic-shape")
    got = {f.evidence["operators"][0]: f.evidence["calls"] for f in found}
    assert got == want
    for f in found:  # never more than the calls' time; device idle, not host time
        t = f.evidence["operators"][0]
        assert f.saving_limit_us == pytest.approx(compile_us[t], abs=0.01)
        assert f.saving_us <= f.saving_limit_us
        assert f.saving_method == "device-idle"
    # the device waits on the first conv's compile only: the others run while it is busy
    assert 0 < max(f.saving_pct for f in found) < 1.0


@pytest.mark.parametrize("rel", REAL)
def test_real_packet_transit_sizes_match_communication_json(rel: str) -> None:
    """The SDMA transit size of each collective, from the HCCL tasks of trace_view.json, equals
    msprof's own figure in communication.json; every AlexNet all-reduce moves 16 MB or more
    (msprof-analyze's small-packet size), so no finding."""
    from opscope.advise.rules.ascend_comm_packet import transit

    path = shared_trace(rel) / "ASCEND_PROFILER_OUTPUT" / "communication.json"
    comm = json.loads(path.read_text())
    want = {
        name.split("@")[0]: round(op["Communication Bandwidth Info"]["SDMA"]["Transit Size(MB)"], 6)
        for step in comm.values()
        for name, op in step["collective"].items()
        if name != "Total Op Info"
    }
    p = opscope.load(shared_trace(rel))
    names = dict(p.events.select("id", "name").rows())
    got = {names[r["coll"]]: round(r["bytes"] / 1e6, 6) for r in transit(p).iter_rows(named=True)}
    assert got == want and len(got) == 4
    assert min(got.values()) >= 16
    assert advise(p).by_rule("ascend-comm-packet") == []


@pytest.mark.parametrize("rel", REAL)
def test_real_alexnet_has_no_affinity_pattern(rel: str) -> None:
    found = advise(opscope.load(shared_trace(rel)))
    assert found.errors == {}
    assert found.by_rule("ascend-affinity-api") == []


@pytest.mark.parametrize("rel", ["ascend/alexnet_ddp_910b/level0_rank0_ascend_pt"])
def test_fusible_needs_the_pmu_columns(rel: str) -> None:
    """Level0 has no PipeUtilization columns: no MTE time, no fusible-sequence finding."""
    p = opscope.load(shared_trace(rel))
    metrics = set(p.kernel_metrics.get_column("metric").to_list())
    assert not metrics & {"aicore_time(us)", "aiv_time(us)", "aiv_mte2_time(us)"}
    assert advise(p, NAMED).by_rule("ascend-fusible-sequence") == []


@pytest.mark.parametrize("method", ["bound-gap", "device-idle"])
def test_real_fusible_run_occurrences_match_the_kernel_table(method: str) -> None:
    """The 4-rank LLaMA-like run (kernel table only): the top fusible run of each half, its
    occurrences counted here in the raw kernel_details.csv (in start order, non-overlapping),
    equal the finding's. MTE-bound (bound-gap): every kernel a vector kernel (no cube time)
    with MTE over 80% of its core time. Host-bound (device-idle): no cube time, the kernels
    busy under 40% of the runs' wall time, and the saving is the idle inside the runs."""
    root = (
        Path(__file__).resolve().parents[2] / "ascend_data" / "st" / "level2" / "rank_0_ascend_pt"
    )
    if not root.is_dir():
        pytest.skip(f"{root} not found")
    found = advise(opscope.load(root), NAMED).by_rule("ascend-fusible-sequence")
    found = [f for f in found if f.saving_method == method]
    assert found, "no fusible run"
    top = found[0]
    assert 0 < top.saving_us <= top.saving_limit_us
    with (root / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv").open() as f:
        rows = sorted(csv.DictReader(f), key=lambda r: float(r["Start Time(us)"].strip()))
    rows = [r for r in rows if r["Accelerator Core"] != "COMMUNICATION"]

    def shapes(r: dict[str, str]) -> str:
        parts = r["Input Shapes"].strip('"').split(";")
        if not all(x.strip().isdigit() for p in parts for x in p.split(",") if x):
            return "?"  # N/A: never one of a run's shapes
        return json.dumps([[int(x) for x in p.split(",") if x] for p in parts]).replace(" ", "")

    want = list(zip(top.evidence["operators"], top.evidence["shapes"], strict=True))
    n, i, hits = len(want), 0, 0
    wall = busy_sum = 0.0
    while i + n <= len(rows):
        run = rows[i : i + n]
        if [(r["Type"], shapes(r)) for r in run] == want:
            for r in run:
                mte = max(float(r["aic_mte2_time(us)"]), float(r["aiv_mte2_time(us)"])) + max(
                    float(r["aic_fixpipe_time(us)"]), float(r["aiv_mte3_time(us)"])
                )
                busy = float(r["aicore_time(us)"]) + float(r["aiv_time(us)"])
                assert float(r["aic_mac_time(us)"]) == 0
                if method == "bound-gap":
                    assert mte / busy > 0.8
            t0 = float(run[0]["Start Time(us)"])
            wall += max(float(r["Start Time(us)"]) + float(r["Duration(us)"]) for r in run) - t0
            busy_sum += sum(float(r["Duration(us)"]) for r in run)
            hits += 1
            i += n
        else:
            i += 1
    assert hits == top.evidence["calls"] > 5
    if method == "device-idle":
        assert busy_sum / wall < 0.4
        steps = len({r["Step Id"] for r in rows})
        assert top.saving_us == pytest.approx((wall - busy_sum) / steps, rel=1e-3)


def test_real_host_bound_run_with_nonzero_is_a_sync() -> None:
    """The 4-rank run's Greater -> MemSet -> NonZero -> Slice runs are host-bound because the
    host reads NonZero's output size back: the fix avoids the data-dependent shape."""
    root = (
        Path(__file__).resolve().parents[2] / "ascend_data" / "st" / "level2" / "rank_0_ascend_pt"
    )
    if not root.is_dir():
        pytest.skip(f"{root} not found")
    found = advise(opscope.load(root), NAMED).by_rule("ascend-fusible-sequence")
    (f,) = [f for f in found if "NonZero" in f.evidence["operators"]]
    assert f.saving_method == "device-idle" and "NonZero syncs with the host" in f.title
    assert "torch.where" in f.fix and "torchair" not in f.fix
    others = [g for g in found if g is not f and g.saving_method == "device-idle"]
    assert others and all("torchair" in g.fix for g in others)


def test_affinity_matcher_skips_views_and_stops_at_other_ops() -> None:
    from opscope.advise.rules.ascend_affinity import _matches

    names = [
        "aten::add_", "aten::view", "aten::layer_norm",  # in-place add, a view between
        "aten::silu", "aten::mul",  # fusion-ascend-affinity's SwiGLU: not this rule's
        "aten::add", "Optimizer.step#AdamW.step", "aten::layer_norm",  # a non-aten op between
        "aten::chunk", "aten::gelu", "aten::mul",  # GeGLU
    ]  # fmt: skip
    got = [(p.api, pos) for p, pos in _matches(names)]
    assert got == [
        ("torch_npu.npu_geglu", [8, 9, 10]),
        ("torch_npu.npu_add_layer_norm", [0, 2]),
    ]
