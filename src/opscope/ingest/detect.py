"""What a JSON file is, from its first bytes: a trace, or something that only looks like one.

:func:`classify` reads at most :data:`HEAD_BYTES` (inflated, for gzip) and never parses the whole
file, so it costs the same for a 10 GB trace as for a 10 kB one. It exists so that files which are
valid JSON but not a torch.profiler trace are named rather than read as an empty trace:

- ``memory_timeline``: torch's ``export_memory_timeline`` output, ``[times, sizes]`` or the raw
  ``[[ts, action, bytes, category], ...]`` (a top-level array whose first item is an array);
- ``rocprof``: a rocprofiler-sdk JSON (``rocprofv3 --output-format json``), an object keyed
  ``rocprofiler-sdk-tool``;
- ``ascend``: an Ascend profiler ``trace_view.json`` (an array of events whose timestamps are
  strings, ``"ts": "1736405443863674.400"``, which Kineto never writes, or with Ascend
  process names such as ``Ascend Hardware`` / ``CANN``);
- ``execution_trace``: torch's execution trace (``ExecutionTraceObserver``), an object keyed
  ``schema``, ``pid``, ``time``, ``start_ts``, ``nodes``: every operator with its shapes, no
  timings (param's et_replay and Chakra read it; opscope needs the Kineto trace beside it);
- ``not_trace``: a JSON object that ends within the head without a ``traceEvents`` key
  (``config.json``, ``truth.json``);
- ``trace``: anything else (the reader decides, and names what is wrong).
"""

from __future__ import annotations

import json
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

#: Leading bytes read (after inflating): enough for a Kineto header before ``traceEvents``.
HEAD_BYTES = 256 * 1024

Kind = Literal["trace", "memory_timeline", "rocprof", "ascend", "execution_trace", "not_trace"]

# Kineto writes numeric timestamps; the Ascend profiler writes them as strings.
_ASCEND_TS = re.compile(r'"ts"\s*:\s*"\d')
_ASCEND_NAMES = re.compile(r'"name"\s*:\s*"(?:Ascend Hardware|CANN|AscendCL|Overlap Analysis)"')


@dataclass(frozen=True)
class Shape:
    """What :func:`classify` found: the ``kind`` and, for ``not_trace``, the top-level keys."""

    kind: Kind
    keys: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """One line saying what the file is (empty for a trace)."""
        if self.kind == "memory_timeline":
            return (
                "this is torch's memory timeline export (export_memory_timeline), not a trace; "
                "open the trace written by export_chrome_trace or tensorboard_trace_handler"
            )
        if self.kind == "rocprof":
            return (
                "this is a rocprofiler-sdk JSON (rocprofv3 --output-format json), not a "
                "torch.profiler trace; opscope reads torch.profiler traces (ROCm runs write the "
                "same Kineto format)"
            )
        if self.kind == "ascend":
            return (
                "this is an Ascend profiler trace_view.json; open its *_ascend_pt directory "
                "(the Ascend reader also needs the files beside it), or name the file "
                "trace_view.json"
            )
        if self.kind == "execution_trace":
            return (
                "this is a PyTorch execution trace (ExecutionTraceObserver): operators and "
                "shapes without timings, not a torch.profiler trace; open the Kineto trace "
                "recorded with it (export_chrome_trace or tensorboard_trace_handler), or record "
                "one with `opscope record`"
            )
        if self.kind == "not_trace":
            keys = ", ".join(self.keys[:6]) + (", ..." if len(self.keys) > 6 else "")
            return f"a JSON object without traceEvents (keys: {keys or 'none'}): not a trace"
        return ""


def head(path: Path, n: int = HEAD_BYTES) -> bytes:
    """The first ``n`` bytes of ``path``, inflated when it is gzip (b"" when unreadable)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(n)
    except OSError:
        return b""
    if raw[:2] != b"\x1f\x8b":
        return raw
    d = zlib.decompressobj(wbits=31)
    try:
        return d.decompress(raw, n)
    except zlib.error:
        return b""


def classify(path: Path) -> Shape:
    """What ``path`` holds, judged from its head (see the module doc)."""
    text = head(path).decode("utf-8", "replace").lstrip("\ufeff")
    i = skip_ws(text, 0)
    if i >= len(text):
        return Shape("trace")
    if text[i] == "[":
        j = skip_ws(text, i + 1)
        if j < len(text) and text[j] == "[":
            return Shape("memory_timeline")
        if _ASCEND_TS.search(text) or _ASCEND_NAMES.search(text):
            return Shape("ascend")
        return Shape("trace")
    if text[i] != "{":
        return Shape("trace")
    return _object_shape(text, i)


def _object_shape(text: str, i: int) -> Shape:
    """Walk the top-level keys of the object at ``text[i]`` until ``traceEvents`` or the end."""
    dec = json.JSONDecoder()
    keys: list[str] = []
    i += 1
    while True:
        i = skip_ws(text, i)
        if i >= len(text):
            return Shape("trace")  # the head ran out: undecided, the reader judges
        if text[i] == "}":
            return Shape("not_trace", keys)
        try:
            key, i = dec.raw_decode(text, i)
        except ValueError:
            return Shape("trace")
        if key == "traceEvents":
            return Shape("trace")
        if key == "rocprofiler-sdk-tool":
            return Shape("rocprof")
        if key == "nodes" and "schema" in keys:
            # (decided at the key: the node list is most of the file, past the head)
            return Shape("execution_trace")
        keys.append(str(key))
        i = skip_ws(text, i)
        if i >= len(text) or text[i] != ":":
            return Shape("trace")
        i = skip_ws(text, i + 1)
        try:
            _, i = dec.raw_decode(text, i)
        except (ValueError, RecursionError):  # (deeply nested: the reader says so)
            return Shape("trace")
        i = skip_ws(text, i)
        if i < len(text) and text[i] == ",":
            i += 1


def skip_ws(text: str, i: int) -> int:
    """The first position at or after ``i`` that is not JSON whitespace (``len(text)`` if none)."""
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i
