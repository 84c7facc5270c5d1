"""What is communication: the kernel-name classifier, the launching-op rule, and real traces.

The names in the tables are real kernel names taken from public traces (TraceLens, HTA test data,
a DeepSeek H800 training trace, Ascend msprof output) unless marked otherwise.
"""

from __future__ import annotations

import csv
import gzip
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from conftest import shared_trace
from opscope.analysis.registry import run
from opscope.ingest import load
from opscope.model import kinds, schema

# fmt: off
COMMUNICATION = [
    # NCCL (A100/V100 HTA traces), old and new kernel naming
    "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)",
    "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
    "ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
    "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",  # B200
    "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)",  # RCCL on MI300
    # DeepEP (DeepSeek H800 training trace)
    "void dpsk::ep::internode::dispatch<false, 8, true, 8>(int4*, float*, long*, float*, "
    "dpsk::ep::internode::SourceMeta*, int4 const*, float const*, long const*, float const*, "
    "int*, int*, int*, int*, int const*, int const*, int const*, int const*, int, int, int, int, "
    "int, bool const*, void*, int, int, void**, int, int, int, int, int*)",
    "void dpsk::ep::internode::combine<false, 8, __nv_bfloat16, 8, 2, 16, 24>(int4*, float*, "
    "bool const*, int4 const*, float const*, int4 const*, int4 const*, int const*, int const*, "
    "dpsk::ep::internode::SourceMeta const*, int const*, int const*, int const*, int, int, int, "
    "int, void*, int, int, void**, int, int, int, int, int*)",
    "void dpsk::ep::internode::notify_dispatch<false, 8>(int const*, long*, int, int const*, "
    "int*, int const*, int*, int, bool const*, int, int, int, int, int, int, int, int*, int*, "
    "int*, int*, void*, void**, int**, int, int, int*, int)",
    "void dpsk::ep::internode::cached_notify<false>(int, int, int, int, int*, int, int, "
    "int const*, int const*, int*, void*, void**, int**, int, int, int, int*, bool, int)",
    # torch symmetric memory (vLLM on B200)
    "void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*, "
    "unsigned long, unsigned int**, unsigned long, unsigned long)",
    # Ascend HCCL (msprof kernel_details)
    "hcom_allReduce__586_0_1",
    "hcom_broadcast__483_0",
    # Not in the stored traces: named after the libraries' sources.
    "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long*, float*)",
    "void deep_ep::internode_ll::combine<false, 7168>(void*, void*, int*, void*)",
    "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, "
    "vllm::RankSignals, vllm::Signal*, __nv_bfloat16*, int, int)",
    "void vllm::cross_device_reduce_2stage<float, 8>(vllm::RankData*, vllm::RankSignals, "
    "vllm::Signal*, float*, int, int)",
    "void c10d::symmetric_memory::one_shot_all_reduce_kernel<float, 16, 8>(float**, float*)",
    "void c10d::symmetric_memory::two_shot_all_reduce_kernel<c10::BFloat16, 16, 4>(void**)",
    "nvshmemi_proxy_progress_kernel",
    "void vllm::all_reduce<float>(float*, int)",
]

NOT_COMMUNICATION = [
    # elementwise kernels on broadcast tensors (xDiT SD3.5 on MI300; the example)
    "void at::native::elementwise_kernel_manual_unroll<128, 4, at::native::(anonymous namespace)"
    "::type_specialized_broadcast_kernel_launcher<1>::apply<at::native::BinaryFunctor<float, "
    "float, float, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul>, "
    "std::array<c10::ScalarType, 3ul>, OffsetCalculator<3, unsigned int, false> >",
    "BinaryOp broadcast multiply",
    "aclnnExpand_BroadcastToAiCore_BroadcastTo",  # Ascend naming
    # reductions, gathers and scatters that stay on one device
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::"
    "func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()"
    "(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4> >",
    "void at::native::_scatter_gather_elementwise_kernel<128, 4, at::native::"
    "_cuda_scatter_gather_internal_kernel<true, float>::operator()<at::native::ReduceAdd>"
    "(at::TensorIterator&, long, long, long, at::native::ReduceAdd const&)::{lambda(int)#1}>",
    "void at::native::vectorized_gather_kernel<16, long>(char*, char*, long*, int, long, long, "
    "long, long, bool)",
    "void splitKreduce_kernel<float, float, float, float, true, false, false>"
    "(cublasSplitKParams<float>, float const*, float const*, float*)",
    "void paged_attention_ll4mi_reduce_kernel<__hip_bfloat16, __hip_bfloat16, 128, 128, 256, 3, "
    "false>(__hip_bfloat16*, float const*, float const*)",
    "void cudnn::cnn::reduce_wgrad_nchw_helper<float, float>(void*, void const*, float, int, int)",
    "_finalize_matmul_scatter_bf16",
    "reduce_segments",
    # DeepEP's layout kernel counts tokens per rank on this device: no data leaves it
    "void dpsk::ep::cuda::get_dispatch_layout<256, 32, 8>(long const*, int*, int*, int*, bool*, "
    "int, int, int, int)",
    # collective words inside a longer identifier are not whole tokens
    "block_all_reduce_sum_kernel",
    "volta_sgemm_128x64_nn",
]
# fmt: on


def _classify(names: list[str]) -> list[bool]:
    s = pl.Series("name", names, dtype=pl.String)
    return s.to_frame().select(kinds.is_comm_kernel_name(pl.col("name"))).to_series().to_list()


@pytest.mark.parametrize("name", COMMUNICATION)
def test_communication_kernel_names(name: str) -> None:
    assert _classify([name]) == [True]


@pytest.mark.parametrize("name", NOT_COMMUNICATION)
def test_compute_kernel_names(name: str) -> None:
    assert _classify([name]) == [False]


def test_subsets_nest() -> None:
    dk, dw, lw = set(kinds.DEVICE_KINDS), set(kinds.DEVICE_WORK), set(kinds.LOCAL_WORK)
    assert set(kinds.COMPUTE_KINDS) | set(kinds.COPY_KINDS) == lw
    assert lw | {kinds.COMMUNICATION} == dw
    assert dw | {"gpu_annotation"} == dk
    assert dk <= set(schema.EVENT_KINDS)
    assert set(schema.HOST_KINDS) == set(schema.EVENT_KINDS) - dk


# -------------------------------------------------------------------------- the launching op


def _x(cat: str, name: str, ts: float, dur: float, **args: Any) -> dict[str, Any]:
    dev = cat in ("kernel", "gpu_memcpy")
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": 0 if dev else 1,
        "tid": 7 if dev else 1,
        "ts": ts,
        "dur": dur,
        "args": {**args, **({"device": 0, "stream": 7} if dev else {})},
    }


def test_launching_op_decides(tmp_path: Path) -> None:
    ev = [
        # c10d::allreduce_ > record_param_comms > nccl:all_reduce > launch of a kernel whose
        # name says nothing: communication through its launching op
        _x("cpu_op", "c10d::allreduce_", 0, 100),
        _x("cpu_op", "record_param_comms", 5, 50),
        _x("user_annotation", "nccl:all_reduce", 6, 40),
        _x("cuda_runtime", "cudaLaunchKernel", 10, 5, correlation=1),
        _x("kernel", "custom_collective_kernel", 20, 10, correlation=1),
        # inside the same c10d op, a nested aten::copy_ launches a copy kernel and a memcpy:
        # local work, not communication
        _x("cpu_op", "aten::copy_", 60, 30),
        _x("cuda_runtime", "cudaLaunchKernel", 65, 5, correlation=2),
        _x("kernel", "void at::native::copy_kernel", 70, 5, correlation=2),
        _x("cuda_runtime", "cudaMemcpyAsync", 75, 5, correlation=3),
        _x("gpu_memcpy", "Memcpy DtoD (Device -> Device)", 80, 5, correlation=3),
        # an elementwise broadcast kernel under aten::mul
        _x("cpu_op", "aten::mul", 200, 50),
        _x("cuda_runtime", "cudaLaunchKernel", 210, 5, correlation=4),
        _x("kernel", "BinaryOp broadcast multiply", 220, 5, correlation=4),
        # a p2p annotation without a cpu_op around the launch
        _x("user_annotation", "nccl:send", 300, 40),
        _x("cuda_runtime", "cudaLaunchKernel", 310, 5, correlation=5),
        _x("kernel", "p2p_push_kernel", 320, 5, correlation=5),
        # an NCCL kernel under an unrelated op: its name decides
        _x("cpu_op", "aten::add", 400, 30),
        _x("cuda_runtime", "cudaLaunchKernel", 405, 5, correlation=6),
        _x("kernel", "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", 410, 5,
           correlation=6),
    ]  # fmt: skip
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": ev}))
    p = load(path, cache=False)
    got = dict(
        p.events.filter(pl.col("device").is_not_null())
        .select("name", pl.col("kind").cast(pl.String))
        .iter_rows()
    )
    assert got == {
        "custom_collective_kernel": "communication",
        "void at::native::copy_kernel": "kernel",
        "Memcpy DtoD (Device -> Device)": "memcpy",
        "BinaryOp broadcast multiply": "kernel",
        "p2p_push_kernel": "communication",
        "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)": "communication",
    }
    # the breakdown's communication is exactly these kernels' time (10 + 5 + 5 µs, no overlap)
    steps = run("breakdown", p).steps  # type: ignore[attr-defined]
    assert int(steps.get_column("communication_ns").sum()) == 20_000


# ---------------------------------------------------------------------------- real traces


def _innermost_op(ops: list[dict[str, Any]], e: dict[str, Any]) -> str | None:
    around = [o for o in ops if o["ts"] <= e["ts"] and o["ts"] + o["dur"] >= e["ts"] + e["dur"]]
    if not around:
        return None
    return str(max(around, key=lambda o: (o["ts"], -o["dur"]))["name"])


def test_nccl_trace_communication_event_by_event() -> None:
    path = shared_trace("gpu/hta_nccl_a100_rank0of2.json.gz")
    evs = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    xs = [e for e in evs if e.get("ph") == "X"]
    ops: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for e in xs:
        if e.get("cat") == "cpu_op":
            ops.setdefault((e["pid"], e["tid"]), []).append(e)
    launch = {
        e["args"]["correlation"]: e
        for e in xs
        if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})
    }
    want = set()
    by_op = 0
    for k in xs:
        if k.get("cat") != "kernel":
            continue
        key = (k["name"], round(Decimal(str(k["ts"])) * 1000))
        rt = launch.get(k["args"].get("correlation"))
        op = _innermost_op(ops.get((rt["pid"], rt["tid"]), []), rt) if rt else None
        if op == "record_param_comms":
            by_op += 1
            want.add(key)
        if k["name"].startswith("nccl"):
            want.add(key)
    assert len(want) == 21 and by_op == 21  # 15 all-reduce + 6 broadcast, all launched by c10d
    p = load(path, cache=False)
    comm = p.events.filter(pl.col("kind") == "communication")
    got = {(n, t) for n, t in comm.select("name", "ts_ns").iter_rows()}
    assert comm.height == len(want)
    assert got == want
    # and none of the trace's other kernels is communication
    kernels = sum(1 for e in xs if e.get("cat") == "kernel")
    assert p.events.filter(pl.col("kind") == "kernel").height == kernels - len(want)


def test_ascend_collectives_by_core_type() -> None:
    root = shared_trace("ascend/alexnet_ddp_910b/level1_rank0_ascend_pt")
    out = root / "ASCEND_PROFILER_OUTPUT"
    with open(out / "kernel_details.csv", newline="", encoding="utf-8-sig") as f:
        rows = list(csv.DictReader(f))
    want = {
        (r["Name"], int(Decimal(r["Start Time(us)"].strip(' \t"')) * 1000))
        for r in rows
        if r["Accelerator Core"] == "HCCL"
    }
    trace = json.loads((out / "trace_view.json").read_text())
    hccl = {
        e["pid"]
        for e in trace
        if e.get("ph") == "M" and e.get("name") == "process_name" and e["args"]["name"] == "HCCL"
    }
    plane_tasks = [
        e for e in trace if e.get("ph") == "X" and e["pid"] in hccl and e.get("tid") != 0
    ]
    p = load(root, cache=False)
    comm = p.events.filter(pl.col("kind") == "communication")
    assert len(want) == 4 and len(plane_tasks) > 100
    # one event per collective: the HCCL kernel_details rows, not their per-plane tasks
    assert set(comm.select("name", "ts_ns").iter_rows()) == want
    assert comm.height == len(want)
