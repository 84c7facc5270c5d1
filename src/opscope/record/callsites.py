"""The call-site line of every op: an annotation around each torch call made from model code.

torch.profiler's Python frames name a function by its first line (``model.py(39): forward``),
so every op in ``forward`` would be charged to ``def forward``. While a sample records, a
``TorchFunctionMode`` sees each torch function the model calls (``torch.matmul``, ``F.linear``
inside ``nn.Linear``, ``x + b``), walks up to the innermost frame of model code (see
:mod:`opscope.model.usercode`: outside torch itself; model libraries such as transformers count
as model code) and wraps the call in a profiler annotation named
``opscope.line: model.py(30): forward`` — the line being executed, not the function's first
line. The annotation is in the trace, so Perfetto shows it too; the reader turns it into the
innermost Python frame of the ops it encloses (:func:`opscope.ingest.link.call_site_frames`),
and attribution then charges each op, and through its forward op each backward kernel, to that
line.

Costs are paid only while a sample records (the mode is entered when the profiler starts
recording and left when it stops): a frame walk cached per code object and one fast
record-function per torch call. benchmarks/line_overhead.py measures it against plain
torch.profiler. ``Tensor.backward`` and ``torch.autograd.backward/grad`` are not wrapped: the
backward ops belong to their forward op's line, not to the line that called ``backward()``.
"""

from __future__ import annotations

import os
import sys
from types import CodeType, FrameType
from typing import Any

from opscope.model.usercode import CALL_SITE_PREFIX, is_model_file

_SKIP_NAMES = frozenset({"backward", "grad"})


def _short(path: str) -> str:
    """``path`` relative to the longest ``sys.path`` entry holding it, as Kineto names files."""
    best = ""
    for entry in sys.path:
        if entry and path.startswith(entry.rstrip(os.sep) + os.sep) and len(entry) > len(best):
            best = entry.rstrip(os.sep) + os.sep
    return path[len(best) :] if best else path


class CallSites:
    """Enter to annotate every torch call with its model-code line; leave to stop.

    Built lazily around ``torch.overrides.TorchFunctionMode`` so that importing this module
    needs no torch.
    """

    def __init__(self) -> None:
        import torch
        from torch.overrides import TorchFunctionMode

        record = torch._C._profiler._RecordFunctionFast
        is_model: dict[CodeType, bool] = {}
        self._is_model = is_model
        names: dict[tuple[CodeType, int], str] = {}

        def site(frame: FrameType | None) -> str | None:
            while frame is not None:
                code = frame.f_code
                user = is_model.get(code)
                if user is None:
                    user = is_model[code] = is_model_file(code.co_filename)
                if user:
                    key = (code, frame.f_lineno)
                    name = names.get(key)
                    if name is None:
                        name = names[key] = (
                            f"{CALL_SITE_PREFIX}{_short(code.co_filename)}"
                            f"({frame.f_lineno}): {code.co_name}"
                        )
                    return name
                frame = frame.f_back
            return None

        class _Mode(TorchFunctionMode):
            def __torch_function__(
                self,
                func: Any,
                types: Any,
                args: Any = (),
                kwargs: Any = None,
            ) -> Any:
                if kwargs is None:
                    kwargs = {}
                name = None
                if getattr(func, "__name__", "") not in _SKIP_NAMES:
                    name = site(sys._getframe(1))
                if name is None:
                    return func(*args, **kwargs)
                with record(name):
                    return func(*args, **kwargs)

        self._mode: Any = _Mode()
        self._entered = False

    def files(self) -> list[str]:
        """The model-code files that calls were made from (absolute paths, first seen first)."""
        return list(dict.fromkeys(c.co_filename for c, m in self._is_model.items() if m))

    @property
    def active(self) -> bool:
        """True between :meth:`enter` and :meth:`leave`."""
        return self._entered

    def enter(self) -> None:
        """Start annotating calls made on this thread (no-op when already on)."""
        if not self._entered:
            self._mode.__enter__()
            self._entered = True

    def leave(self) -> None:
        """Stop annotating (no-op when off)."""
        if self._entered:
            self._entered = False
            self._mode.__exit__(None, None, None)
