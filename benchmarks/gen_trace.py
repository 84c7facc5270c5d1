"""Write a realistic Kineto trace of any size, deterministic from a seed.

Each training step holds: a ``ProfilerStep#N`` annotation; ``python_function`` frames (script ->
``nn.Module`` tree -> torch forward frames); forward ``cpu_op`` trees with shapes
(``aten::linear`` -> ``aten::t`` + ``aten::addmm``, ``aten::relu``, ``aten::conv2d`` ->
``aten::convolution``), each leaf launching a kernel (``cudaLaunchKernel`` with correlation and
External id, ``kernel`` on stream 7, ``ac2g`` flow); ``[memory]`` instants; a backward pass on a
second thread (``autograd::engine::evaluate_function: XBackward0`` -> ``XBackward0`` -> ops and
kernels) linked by ``fwdbwd`` flows; an optimizer step with a memcpy and a memset.

    python benchmarks/gen_trace.py out.json --mb 100 [--seed 0] [--gzip]
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import random
from pathlib import Path

PID = 4242
TID = 4242
BWD_TID = 4300
STREAM = 7


class Gen:
    """Stateful writer of events (ids, clocks) into a text buffer."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.t = 3_000_000_000.0  # µs, steady clock (~35 days of uptime)
        self.gpu_t = self.t
        self.ext = 0
        self.corr = 0
        self.pyid = 0
        self.flow = 0
        self.ev_idx = 0
        self.seq = 0
        self.out: list[str] = []

    def _ts(self, x: float) -> str:
        return f"{x:.3f}"

    def x(
        self, cat: str, name: str, ts: float, dur: float, args: str, pid: int = PID, tid: int = TID
    ) -> None:
        self.out.append(
            f'  {{\n    "ph": "X", "cat": "{cat}", "name": {json.dumps(name)}, "pid": {pid}, '
            f'"tid": {tid},\n    "ts": {self._ts(ts)}, "dur": {self._ts(dur)},\n'
            f'    "args": {{\n{args}\n    }}\n  }}'
        )

    def flow_ev(self, ph: str, fid: int, ts: float, cat: str, pid: int, tid: int) -> None:
        bp = ', "bp": "e"' if ph == "f" else ""
        self.out.append(
            f'  {{\n    "ph": "{ph}", "id": {fid}, "pid": {pid}, "tid": {tid}, '
            f'"ts": {self._ts(ts)}, "cat": "{cat}", "name": "{cat}"{bp}\n  }}'
        )

    def mem(self, ts: float, nbytes: int) -> None:
        self.ev_idx += 1
        self.out.append(
            f'  {{\n    "ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", '
            f'"pid": {PID}, "tid": {TID},\n    "ts": {self._ts(ts)},\n    "args": {{\n'
            f'      "Total Reserved": 2097152, "Total Allocated": {abs(nbytes) * 3}, '
            f'"Bytes": {nbytes}, "Addr": {94000000000000 + self.rng.randrange(1 << 30)}, '
            f'"Device Id": 0, "Device Type": 1, "Ev Idx": {self.ev_idx}\n    }}\n  }}'
        )

    def op_args(self, dims: str, types: str, seq: int | None = None) -> str:
        self.ext += 1
        self.ev_idx += 1
        extra = f', "Sequence number": {seq}, "Fwd thread id": 0' if seq is not None else ""
        return (
            f'      "External id": {self.ext}, "Record function id": 0{extra}, '
            f'"Concrete Inputs": ["", ""], "Input type": {types}, '
            f'"Input Strides": [[1024, 1], [1]], "Input Dims": {dims}, "Ev Idx": {self.ev_idx}'
        )

    def launch(self, ts: float, kname: str, tid: int = TID) -> float:
        """A cudaLaunchKernel at ``ts`` and its kernel; returns the launch's end."""
        self.corr += 1
        dur = 3.0 + self.rng.random() * 4
        self.x(
            "cuda_runtime",
            "cudaLaunchKernel",
            ts,
            dur,
            f'      "External id": {self.ext}, "cbid": 211, "correlation": {self.corr}',
            tid=tid,
        )
        self.gpu_t = max(self.gpu_t, ts + dur + 2.0)
        kdur = 5.0 + self.rng.random() * 50
        self.x(
            "kernel",
            kname,
            self.gpu_t,
            kdur,
            f'      "External id": {self.ext}, "queued": 0, "device": 0, "context": 1, '
            f'"stream": {STREAM}, "correlation": {self.corr}, "registers per thread": 32, '
            f'"shared memory": 0, "blocks per SM": 0.5, "warps per SM": 2.0, '
            f'"grid": [{self.rng.randrange(1, 512)}, 1, 1], "block": [128, 1, 1], '
            f'"est. achieved occupancy %": {self.rng.randrange(5, 100)}',
            pid=0,
            tid=STREAM,
        )
        self.flow_ev("s", self.corr, ts, "ac2g", PID, tid)
        self.flow_ev("f", self.corr, self.gpu_t, "ac2g", 0, STREAM)
        self.gpu_t += kdur + 1.0
        return ts + dur

    def leaf(
        self, name: str, ts: float, dims: str, kname: str, seq: int | None = None, tid: int = TID
    ) -> float:
        """An op with one kernel; returns its end."""
        args = self.op_args(dims, '["float", "float"]', seq)
        lts = ts + 1.5
        lend = self.launch(lts, kname, tid=tid)
        end = lend + 1.0
        self.x("cpu_op", name, ts, end - ts, args, tid=tid)
        return end

    def layer(self, ts: float, i: int, fwd_starts: list[tuple[int, float]]) -> float:
        """One Linear + ReLU under python frames; records fwdbwd flow starts."""
        n = 256 + 64 * (i % 4)
        pid0 = self.pyid = self.pyid + 1
        mod_ts = ts
        # linear
        self.seq += 1
        s_lin = self.seq
        t0 = ts + 2.0
        args_lin = self.op_args(
            f"[[32, {n}], [{n}, {n}], [{n}]]", '["float", "float", "float"]', s_lin
        )
        t_end = self.leaf("aten::t", t0 + 1.0, f"[[{n}, {n}]]", "transpose_kernel")
        self.seq += 1
        s_mm = self.seq
        fwd_starts.append((s_mm, t_end + 0.5))
        mm_end = self.leaf(
            "aten::addmm",
            t_end + 0.5,
            f"[[{n}], [32, {n}], [{n}, {n}]]",
            "ampere_sgemm_128x64_tn",
            seq=s_mm,
        )
        self.x("cpu_op", "aten::linear", t0, mm_end + 0.5 - t0, args_lin)
        self.mem(t0 + 0.7, 4 * 32 * n)
        # relu
        self.seq += 1
        fwd_starts.append((self.seq, mm_end + 2.0))
        r_end = self.leaf(
            "aten::relu",
            mm_end + 2.0,
            f"[[32, {n}]]",
            "void at::native::vectorized_elementwise_kernel<4, at::native::"
            "(anonymous namespace)::launch_clamp_scalar>",
            seq=self.seq,
        )
        end = r_end + 1.0
        # python frames: module frame + torch forward frame
        self.pyid += 1
        self.x(
            "python_function",
            f"nn.Module: Linear_{i}",
            mod_ts,
            end - mod_ts,
            f'      "Python parent id": 1, "Python id": {pid0}, "Python module id": {i}',
        )
        self.x(
            "python_function",
            "torch/nn/modules/linear.py(124): forward",
            mod_ts + 0.5,
            mm_end - mod_ts,
            f'      "Python parent id": {pid0}, "Python id": {self.pyid}',
        )
        return end + 1.0

    def step(self, n: int, layers: int) -> None:
        ts0 = self.t
        t = ts0 + 5.0
        fwd: list[tuple[int, float]] = []
        self.x(
            "python_function",
            "train.py(42): train_step",
            ts0 + 1.0,
            0.0,
            '      "Python parent id": null, "Python id": 1',
        )
        top_index = len(self.out) - 1
        for i in range(layers):
            t = self.layer(t, i, fwd)
        # backward on the autograd thread
        bt = t + 10.0
        for seq, fts in reversed(fwd):
            self.ext += 1
            self.ev_idx += 1
            name = "AddmmBackward0" if self.rng.random() < 0.5 else "ReluBackward0"
            inner_ts = bt + 2.0
            self.flow += 1
            self.flow_ev("s", self.flow, fts, "fwdbwd", PID, TID)
            self.flow_ev("f", self.flow, inner_ts, "fwdbwd", PID, BWD_TID)
            k_end = self.leaf(
                "aten::mm",
                inner_ts + 1.0,
                "[[32, 256], [256, 256]]",
                "ampere_sgemm_64x64_nn",
                tid=BWD_TID,
            )
            seqa = f'      "External id": {self.ext}, "Sequence number": {seq}, "Fwd thread id": 1'
            self.x("cpu_op", name, inner_ts, k_end + 0.5 - inner_ts, seqa, tid=BWD_TID)
            self.x(
                "cpu_op",
                f"autograd::engine::evaluate_function: {name}",
                bt,
                k_end + 1.5 - bt,
                seqa,
                tid=BWD_TID,
            )
            bt = k_end + 3.0
        # optimizer
        ot = bt + 5.0
        self.corr += 1
        self.x(
            "cuda_runtime",
            "cudaMemcpyAsync",
            ot,
            4.0,
            f'      "External id": {self.ext}, "cbid": 41, "correlation": {self.corr}',
        )
        self.x(
            "gpu_memcpy",
            "Memcpy HtoD (Pageable -> Device)",
            self.gpu_t,
            3.0,
            f'      "External id": {self.ext}, "device": 0, "context": 1, "stream": {STREAM}, '
            f'"correlation": {self.corr}, "bytes": 4096, "memory bandwidth (GB/s)": 1.3',
            pid=0,
            tid=STREAM,
        )
        self.gpu_t += 4.0
        self.corr += 1
        self.x(
            "cuda_runtime",
            "cudaMemsetAsync",
            ot + 5.0,
            2.0,
            f'      "External id": {self.ext}, "cbid": 51, "correlation": {self.corr}',
        )
        self.x(
            "gpu_memset",
            "Memset (Device)",
            self.gpu_t,
            1.0,
            f'      "External id": {self.ext}, "device": 0, "context": 1, "stream": {STREAM}, '
            f'"correlation": {self.corr}, "bytes": 1024, "memory bandwidth (GB/s)": 1.0',
            pid=0,
            tid=STREAM,
        )
        self.gpu_t += 2.0
        end = max(ot + 10.0, self.gpu_t)
        self.out[top_index] = self.out[top_index].replace(
            '"dur": 0.000', f'"dur": {end - ts0 - 2.0:.3f}'
        )
        self.x(
            "user_annotation",
            f"ProfilerStep#{n}",
            ts0,
            end - ts0,
            f'      "External id": {self.ext}, "Record function id": 0',
        )
        self.t = end + 20.0


HEADER = """{
  "schemaVersion": 1,
  "deviceProperties": [
    {"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85018279936,
     "computeMajor": 9, "computeMinor": 0, "numSms": 132, "warpSize": 32}
  ],
  "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},
  "record_shapes": 1, "with_stack": 1, "profile_memory": 1,
  "displayTimeUnit": "ms",
  "baseTimeNanoseconds": 1700000000000000000,
  "traceEvents": [
"""
FOOTER = """  {
    "name": "thread_name", "ph": "M", "ts": 3000000000.000, "pid": 4242, "tid": 4242,
    "args": {"name": "thread 4242 (python)"}
  }
],
  "traceName": "gen_trace.py"
}
"""


def generate(path: Path, mb: float, seed: int = 0, *, gz: bool = False, layers: int = 24) -> int:
    """Write a trace of about ``mb`` MB (uncompressed) to ``path``; returns the bytes written."""
    g = Gen(seed)
    target = int(mb * 1024 * 1024)
    written = 0
    raw: io.BufferedIOBase
    raw = gzip.open(path, "wb", compresslevel=3) if gz else open(path, "wb")  # noqa: SIM115
    with raw as f:
        f.write(HEADER.encode())
        written += len(HEADER)
        n = 1
        while written < target:
            g.step(n, layers)
            n += 1
            chunk = (",\n".join(g.out) + ",\n").encode()
            g.out.clear()
            f.write(chunk)
            written += len(chunk)
        f.write(FOOTER.encode())
        written += len(FOOTER)
    return written


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("out", type=Path)
    ap.add_argument("--mb", type=float, default=100.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gzip", action="store_true")
    a = ap.parse_args()
    n = generate(a.out, a.mb, a.seed, gz=a.gzip)
    print(f"wrote {a.out} ({n / 1e6:.1f} MB uncompressed)")


if __name__ == "__main__":
    main()
