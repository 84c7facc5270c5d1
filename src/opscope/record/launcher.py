"""The zero-code launcher behind ``opscope record``, and :func:`record_callable`.

The script runs in this interpreter (``runpy``), as ``python script.py`` / ``python -m pkg`` would
run it: ``sys.argv``, ``sys.path[0]`` and ``__main__`` are set the same way, its exit code is
returned, and an uncaught exception goes to ``sys.excepthook`` with opscope's frames removed.
Steps are detected by a global optimizer step post hook, unless the script calls
``opscope.step()``.
"""

from __future__ import annotations

import gc
import importlib.util
import os
import runpy
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from opscope.errors import RecordError
from opscope.record.api import Recorder, RecordSettings, RunResult, rank_info

_PYTHONS = ("python", "python3")


@dataclass(frozen=True)
class Target:
    """What to run: a script path or a module name, and its arguments."""

    kind: str  # "script" or "module"
    name: str
    args: list[str]

    @property
    def stem(self) -> str:
        return Path(self.name).stem if self.kind == "script" else self.name.split(".")[-1]

    def argv(self) -> list[str]:
        """The command line as the user would type it."""
        head = [self.name] if self.kind == "script" else ["-m", self.name]
        return ["python", *head, *self.args]


def parse_command(cmd: list[str]) -> Target:
    """``python train.py ARGS`` / ``python -m pkg ARGS`` / ``train.py ARGS`` → Target."""
    if not cmd:
        raise RecordError("nothing to record: give the command after --, e.g. -- python train.py")
    rest = list(cmd)
    first = Path(rest[0]).name
    if first in _PYTHONS or first.startswith("python3.") or rest[0] == sys.executable:
        rest.pop(0)
        while rest and rest[0] in ("-u", "-B"):
            rest.pop(0)
    if not rest:
        raise RecordError("no script or -m module after python")
    if rest[0] == "-m":
        if len(rest) < 2:
            raise RecordError("-m needs a module name")
        return Target("module", rest[1], rest[2:])
    if rest[0].startswith("-m") and len(rest[0]) > 2:
        return Target("module", rest[0][2:], rest[1:])
    if rest[0].startswith("-"):
        raise RecordError(f"unsupported python option {rest[0]!r}")
    return Target("script", rest[0], rest[1:])


def validate_target(t: Target) -> None:
    """RecordError before anything runs: script missing or not Python, module not importable."""
    if t.kind == "script":
        p = Path(t.name)
        if not p.exists():
            raise RecordError("script not found", p)
        if not p.is_file():
            raise RecordError("not a file", p)
        if p.suffix not in (".py", ".pyw"):
            try:
                compile(p.read_bytes(), str(p), "exec")
            except (SyntaxError, ValueError, UnicodeDecodeError):
                raise RecordError("not a Python script", p) from None
        return
    saved = list(sys.path)
    sys.path.insert(0, os.getcwd())
    try:
        spec = importlib.util.find_spec(t.name)
        if spec is not None and spec.submodule_search_locations is not None:
            spec = importlib.util.find_spec(f"{t.name}.__main__")
            if spec is None:
                raise RecordError(f"module {t.name!r} is a package with no __main__")
    except (ImportError, ValueError) as e:
        raise RecordError(f"module {t.name!r} is not importable: {e}") from None
    finally:
        sys.path[:] = saved
    if spec is None:
        raise RecordError(f"module {t.name!r} is not importable: no such module")


def default_out_dir(t: Target) -> Path:
    """./opscope-runs/<stem>-<timestamp>; under torchrun a name every local rank agrees on."""
    _, world = rank_info()
    if world > 1:
        rid = os.environ.get("TORCHELASTIC_RUN_ID", "none")
        tag = rid if rid and rid != "none" else f"torchrun-{os.getppid()}"
        return Path("opscope-runs") / f"{t.stem}-{tag}"
    return Path("opscope-runs") / f"{t.stem}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"


def _record(
    fn: Callable[[], Any],
    out_dir: str | os.PathLike[str],
    settings: RecordSettings,
    command: list[str] | None,
) -> tuple[RunResult, BaseException | None]:
    rec = Recorder(out_dir, settings, command=command, auto_step=True).start()
    try:
        fn()
    except SystemExit as e:
        code = e.code
        if code is None:
            status = 0
        elif isinstance(code, int):
            status = code
        else:
            print(code, file=sys.stderr)
            status = 1
        return rec.stop("completed" if status == 0 else "failed", status), None
    except KeyboardInterrupt as e:
        return rec.stop("interrupted", 130), e
    except BaseException as e:
        return rec.stop("failed", 1), e
    return rec.stop("completed", 0), None


def record_callable(
    fn: Callable[[], Any],
    out_dir: str | os.PathLike[str],
    settings: RecordSettings | None = None,
    *,
    command: list[str] | None = None,
) -> RunResult:
    """Run ``fn()`` recorded exactly as ``opscope record`` records a script.

    Steps are detected from optimizer steps (or ``opscope.step()`` calls inside ``fn``); the run
    directory is complete when this returns. An exception raised by ``fn`` is re-raised after the
    run directory has been written for the completed steps; ``SystemExit`` becomes the result's
    ``exit_code``.
    """
    result, exc = _record(fn, out_dir, settings or RecordSettings(), command)
    if exc is not None:
        raise exc
    return result


def _user_tb(tb: Any) -> Any:
    """Drop the leading frames that belong to opscope and runpy."""
    skip = (os.path.dirname(__file__), os.path.dirname(runpy.__file__ or ""))
    while tb is not None:
        fname = tb.tb_frame.f_code.co_filename
        if fname.startswith(skip[0]) or fname == runpy.__file__ or "<frozen runpy>" in fname:
            tb = tb.tb_next
            continue
        break
    return tb


def run_target(t: Target, out_dir: Path, settings: RecordSettings) -> RunResult:
    """Run the script/module recorded; prints its traceback like Python would; never raises
    for the script's own errors (the exit code is in the result)."""
    saved_argv, saved_path0 = list(sys.argv), sys.path[0] if sys.path else ""

    def run() -> None:
        if t.kind == "script":
            path = os.path.abspath(t.name)
            sys.argv = [t.name, *t.args]
            sys.path[0] = os.path.dirname(os.path.realpath(path))
            runpy.run_path(path, run_name="__main__")
        else:
            sys.argv = ["-m", *t.args]
            sys.path[0] = os.getcwd()
            runpy.run_module(t.name, run_name="__main__", alter_sys=True)

    try:
        result, exc = _record(run, out_dir, settings, t.argv())
    finally:
        sys.argv = saved_argv
        if sys.path:
            sys.path[0] = saved_path0
    if exc is not None:
        sys.stderr.flush()
        tb = _user_tb(exc.__traceback__)
        sys.excepthook(type(exc), exc.with_traceback(tb), tb)
        del exc, tb
    # The script's globals are gone; collect their cycles while the interpreter is fully alive.
    # DDP's reducer is one such cycle and holds the process group: left to the shutdown collection,
    # a gloo worker frees its last all-reduce then, needs the GIL and aborts the process (torch
    # 2.13: "terminate called without an active exception", 16 in 40 plain torchrun runs).
    gc.collect()
    return result


def format_exception_only(exc: BaseException) -> str:
    """One line naming the exception (for summaries)."""
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()
