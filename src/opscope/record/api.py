"""The recorder and the Python API: :func:`profile` and :func:`step`.

One :class:`Recorder` serves every entry point (the API, ``opscope record``, the framework
callbacks): it owns the torch profiler, the step clock, metrics.jsonl, model.json and run.json.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from opscope import __version__
from opscope.errors import RecordError
from opscope.record import devices, rundir
from opscope.record.metrics import MetricsWriter
from opscope.record.model_structure import ModelWatcher, describe
from opscope.record.periodic import LoaderLength, SamplePlan, release
from opscope.record.sigint import GATE

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class RecordSettings:
    """Profiler schedule and options; the same fields as :func:`profile`'s keywords."""

    wait: int = 1
    warmup: int = 1
    active: int = 3
    repeat: int = 1
    skip_first: int = 0
    record_shapes: bool = True
    profile_memory: bool = True
    with_stack: bool = True
    with_modules: bool = True
    with_flops: bool = True
    lines: bool = False
    activities: str | list[str] = "auto"
    every: int | None = None
    every_epochs: int | None = None
    experimental: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> None:
        """RecordError for impossible settings."""
        for name in ("wait", "warmup", "skip_first", "repeat"):
            if getattr(self, name) < 0:
                raise RecordError(f"--{name} must be >= 0")
        if self.active < 1:
            raise RecordError("--active must be >= 1")
        if self.every is not None and self.every < self.warmup + self.active:
            raise RecordError(
                f"--every {self.every} is shorter than one sample (warmup + active = "
                f"{self.warmup + self.active} steps)"
            )
        if self.every is not None and self.every_epochs is not None:
            raise RecordError("use --every or --every-epochs, not both")
        if self.every_epochs is not None and self.every_epochs < 1:
            raise RecordError("--every-epochs must be >= 1")
        unknown = [k for k in self.experimental if k not in devices.ASCEND_OPTIONS]
        if unknown:
            raise RecordError(f"unknown profiler option {unknown[0]!r}")

    @property
    def periodic(self) -> bool:
        return self.every is not None or self.every_epochs is not None

    def planned_active_steps(self) -> int:
        """Active steps of the first cycle(s), for the free-disk estimate."""
        return self.active * (1 if self.periodic else max(self.repeat, 1))


def rank_info() -> tuple[int, int]:
    """(rank, world size) from torchrun's environment, (0, 1) otherwise."""
    rank = os.environ.get("RANK") or os.environ.get("LOCAL_RANK") or "0"
    world = os.environ.get("WORLD_SIZE") or "1"
    try:
        return int(rank), int(world)
    except ValueError:
        return 0, 1


_ACTIVE: list[Recorder] = []

_RECORDING = ("RECORD", "RECORD_AND_SAVE")


@dataclass
class RunResult:
    """What a recording produced."""

    run_dir: Path
    exit_code: int
    steps: int
    profiled_steps: list[int]
    traces: list[Path]
    status: str


class Recorder:
    """Records one run into ``out_dir``: ``start()``, ``step()`` at each step end, ``stop()``."""

    def __init__(
        self,
        out_dir: str | os.PathLike[str],
        settings: RecordSettings,
        *,
        command: list[str] | None = None,
        auto_step: bool = False,
        allow_existing: bool = False,
    ) -> None:
        settings.validate()
        self.out = Path(out_dir)
        self.settings = settings
        self.command = command
        self.auto_step = auto_step
        self.allow_existing = allow_existing
        self.rank, self.world = rank_info()
        self.rank_dir = self.out / f"rank{self.rank}"
        self.step_idx = 0
        self.profiled: list[int] = []
        self.traces: list[Path] = []
        self.status = "running"
        self.exit_code: int | None = None
        self._prof: Any = None
        self._first_active = 0
        self._plan = SamplePlan(settings.wait, settings.every, settings.every_epochs)
        self._periodic = settings.periodic
        self._sample_end = -1
        self._user_steps = False
        self._optimizer: int | None = None
        self._hook: Any = None
        self._sites: Any = None  # record.callsites.CallSites, made at the first recorded step
        self._loader = LoaderLength()
        self._metrics: MetricsWriter | None = None
        self._watcher = ModelWatcher(self._on_root)
        self._t0 = 0
        self._run: dict[str, Any] = {}
        self._started = False
        self._gated = False

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> Recorder:
        """Check the output, write run.json, arm the hooks and (unless periodic) the profiler."""
        if self._started:
            raise RecordError("this recorder was already started")
        self._started = True
        shared = self.world > 1 or self.allow_existing
        rundir.prepare_out_dir(
            self.out, active_steps=self.settings.planned_active_steps(), allow_existing=shared
        )
        self.device = devices.detect()
        self._activities = devices.activities(self.settings.activities, self.device)
        self._experimental = devices.experimental_config(self.settings.experimental, self.device)
        self.rank_dir.mkdir(parents=True, exist_ok=True)
        self._run = self._run_info()
        self._write_run()
        self._metrics = MetricsWriter(self.out / "metrics.jsonl", self.rank)
        self._watcher.arm()
        if self.auto_step:
            from torch.optim.optimizer import register_optimizer_step_post_hook

            self._hook = register_optimizer_step_post_hook(self._optimizer_hook)
        if self._plan.epochs is not None:
            self._plan.epochs.on_epoch = self._epoch_ended
            self._plan.epochs.install()
        self._loader.install()
        _ACTIVE.append(self)
        GATE.arm()
        self._gated = True
        if not self.settings.periodic:
            import torch.profiler as tp

            s = self.settings
            sched = tp.schedule(
                wait=s.wait,
                warmup=s.warmup,
                active=s.active,
                repeat=s.repeat,
                skip_first=s.skip_first,
            )
            self._prof = self._make_profiler(sched)
            self._prof.start()
            self._note_action()
        elif self._plan.starts_at(0):
            self._open_sample(0)
        self._t0 = time.perf_counter_ns()
        return self

    def step(self, *, source: str = "user") -> None:
        """Mark the end of the current step (and the start of the next)."""
        if source == "user":
            self._user_steps = True
        now = time.perf_counter_ns()
        prof = self._prof
        # _name_, not .name: an enum's .name is a Python-level property, traced under with_stack
        profiled = prof is not None and prof.current_action._name_ in _RECORDING
        if self._metrics is not None:
            self._metrics.write(
                self.step_idx,
                now - self._t0,
                self._watcher.take_samples(),
                devices.memory_peaks(self.device),
                profiled,
            )
        if profiled:
            self.profiled.append(self.step_idx)
        if self._plan.epochs is not None:
            self._plan.epochs.on_step()
        if self.step_idx == 0:
            self._loader.on_step()
        self.step_idx += 1
        if prof is not None:
            with GATE:
                prof.step()
                self._note_action()
                if self._periodic and self.step_idx >= self._sample_end:
                    self._call_sites(False)
                    prof.stop()
                    self._prof = None
                    release(prof)
                    if self._metrics is not None:  # a slow step already: write the lines now
                        self._metrics.flush()
        if self._prof is None and self._periodic and self._plan.starts_at(self.step_idx):
            free = rundir.free_disk_bytes(self.out)
            if free >= self.settings.active * rundir.EST_TRACE_BYTES_PER_STEP:
                with GATE:
                    self._open_sample(self.step_idx)
            else:
                self._run.setdefault("skipped_samples", []).append(self.step_idx)
        self._t0 = time.perf_counter_ns()

    def stop(self, status: str = "completed", exit_code: int | None = 0) -> RunResult:
        """Stop the profiler (saving an unfinished active window), write run.json."""
        if self in _ACTIVE:
            _ACTIVE.remove(self)
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        self._watcher.disarm()
        if self._plan.epochs is not None:
            self._plan.epochs.uninstall()
        self._loader.uninstall()
        self._call_sites(False)
        if self._prof is not None:
            prof, self._prof = self._prof, None
            try:
                prof.stop()
            except Exception as e:  # a broken trace must not hide the script's own outcome
                print(f"opscope: could not save the last trace: {e}", file=sys.stderr)
            release(prof)
        if self._metrics is not None:
            self._metrics.close()
            self._metrics = None
        if self.rank == 0 and self.traces:
            self._capture_sources()
        if self._gated:
            self._gated = False
            GATE.disarm()
        self.status = status
        self.exit_code = exit_code
        if self._run:
            self._write_run(final=True)
        return RunResult(
            self.out, exit_code or 0, self.step_idx, list(self.profiled), list(self.traces), status
        )

    def _capture_sources(self) -> None:
        from opscope.record import sources

        seen = self._sites.files() if self._sites is not None else []
        try:
            sources.capture(self.out, sources.model_files(self._watcher.root, seen))
        except OSError as e:  # a full disk must not hide the script's own outcome
            print(f"opscope: could not copy the model's source files: {e}", file=sys.stderr)

    def _epoch_ended(self) -> None:
        # The step now running has fetched no batch of the new epoch yet: a due sample starts here.
        if self._prof is None and self._plan.starts_at(self.step_idx):
            self._open_sample(self.step_idx)

    # -- hooks -----------------------------------------------------------------------------
    def _optimizer_hook(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self._user_steps:
            return
        if self._optimizer is None:
            self._optimizer = id(optimizer)
        if id(optimizer) == self._optimizer:
            self.step(source="optimizer")

    def attach_model(self, module: Any) -> None:
        """Use ``module`` as the model (framework callbacks know it for sure)."""
        self._watcher.attach(module)

    def add_samples(self, n: int) -> None:
        """Count ``n`` samples in the current step (when the model's inputs are not tensors)."""
        self._watcher.samples += n

    def _on_root(self, module: Any) -> None:
        if self.step_idx == 0:
            self._t0 = time.perf_counter_ns()
        if self.rank == 0:
            rundir.atomic_write_json(self.out / "model.json", describe(module))

    # -- profiler --------------------------------------------------------------------------
    def _make_profiler(self, schedule: Callable[[int], Any]) -> Any:
        s = self.settings
        kw: dict[str, Any] = {
            "activities": self._activities,
            "schedule": schedule,
            "on_trace_ready": self._save_trace,
            "record_shapes": s.record_shapes,
            "profile_memory": s.profile_memory,
            "with_stack": s.with_stack,
            "with_modules": s.with_modules,
            "with_flops": s.with_flops,
        }
        if self.device.kind == "npu":
            import torch_npu

            npu_prof: Any = torch_npu.profiler
            kw["on_trace_ready"] = npu_prof.tensorboard_trace_handler(str(self.rank_dir))
            if self._experimental is not None:
                kw["experimental_config"] = self._experimental
            return npu_prof.profile(**kw)
        import torch.profiler as tp

        return tp.profile(**kw)

    def _open_sample(self, first: int) -> None:
        import torch.profiler as tp

        if self._metrics is not None:  # the profiler's start is slow anyway: write the lines now
            self._metrics.flush()

        s = self.settings
        end = first + s.warmup + s.active
        A = tp.ProfilerAction

        def sched(n: int) -> Any:
            k = n - first
            if k < 0 or n >= end:
                return A.NONE
            if k < s.warmup:
                return A.WARMUP
            return A.RECORD_AND_SAVE if n == end - 1 else A.RECORD

        prof = self._make_profiler(sched)
        # Global step numbers in ProfilerStep#N, so samples line up with metrics.jsonl.
        prof.step_num = first
        prof.current_action = sched(first)
        prof._prev_schedule_action = prof.current_action
        self._prof = prof
        self._sample_end = end
        prof.start()
        self._note_action()

    def _note_action(self) -> None:
        prof = self._prof
        if prof is None:
            return
        act = prof.current_action._name_
        if act in _RECORDING and getattr(self, "_last_action", "NONE") not in _RECORDING:
            self._first_active = self.step_idx
        self._last_action = act
        self._call_sites(act in _RECORDING)

    def _call_sites(self, on: bool) -> None:
        """Annotate each torch call with its line while steps record (``lines=True``)."""
        if not self.settings.lines:
            return
        if on:
            if self._sites is None:
                from opscope.record.callsites import CallSites

                self._sites = CallSites()
            self._sites.enter()
        elif self._sites is not None:
            self._sites.leave()

    def _save_trace(self, prof: Any) -> None:
        name = f"step_{self._first_active:06d}.pt.trace.json"
        tmp = self.rank_dir / f".{name}.{os.getpid()}.tmp.json"
        prof.export_chrome_trace(str(tmp))
        dst = self.rank_dir / f"{name}.gz"
        rundir.gzip_file_atomic(tmp, dst)
        self.traces.append(dst)
        self._write_run()

    # -- run.json --------------------------------------------------------------------------
    def _run_info(self) -> dict[str, Any]:
        cmd = self.command if self.command is not None else list(sys.argv)
        cwd = Path.cwd()
        settings = asdict(self.settings)
        return {
            "format": "opscope-run",
            "format_version": rundir.FORMAT_VERSION,
            "opscope_version": __version__,
            "command": rundir.redact_argv(cmd),
            "start_time": datetime.now(UTC).isoformat(timespec="seconds"),
            "host": rundir.host(),
            "versions": rundir.versions(),
            "device": {
                "kind": self.device.kind,
                "name": self.device.name,
                "count": self.device.count,
            },
            "world_size": self.world,
            "profiler": settings,
            "git": rundir.git_commit(cwd),
            "device_processes": rundir.device_processes(self.device.kind),
            "disk_free_bytes": rundir.free_disk_bytes(self.out),
        }

    def _write_run(self, final: bool = False) -> None:
        if self.rank != 0:
            return
        info = dict(self._run)
        info["status"] = self.status
        info["exit_code"] = self.exit_code
        info["steps"] = {
            "per_epoch": self._loader.steps_per_epoch,
            "total": self.step_idx,
            "profiled": list(self.profiled),
            "traces": [str(p.relative_to(self.out)) for p in self.traces],
        }
        if final:
            info["end_time"] = datetime.now(UTC).isoformat(timespec="seconds")
        rundir.atomic_write_json(self.out / "run.json", info)


class profile:
    """Record a run directory around a block or a function.

    ``opscope.profile(out_dir, wait=1, warmup=1, active=3, repeat=1, ...)`` takes the keywords of
    ``torch.profiler.profile`` / ``schedule``; ``every=N`` switches to periodic sampling (a trace
    of ``active`` steps every N steps, profiler off in between). Ascend options
    (``profiler_level``, ``aic_metrics``, ``l2_cache``, ``data_simplification``, ``export_type``)
    go to torch_npu's experimental config; any other keyword is a RecordError.

    Use as ``with opscope.profile("runs/a") as p: ... p.step()`` or as a decorator; inside, the
    module-level :func:`step` marks steps too. ``auto_step=True`` marks a step at every
    optimizer step instead. As a decorator, each call records a run; calls after the first go to
    ``out_dir-2``, ``out_dir-3``, ...
    """

    def __init__(
        self,
        out_dir: str | os.PathLike[str],
        *,
        wait: int = 1,
        warmup: int = 1,
        active: int = 3,
        repeat: int = 1,
        skip_first: int = 0,
        record_shapes: bool = True,
        profile_memory: bool = True,
        with_stack: bool = True,
        with_modules: bool = True,
        with_flops: bool = True,
        lines: bool = False,
        activities: str | list[str] = "auto",
        every: int | None = None,
        every_epochs: int | None = None,
        auto_step: bool = False,
        **experimental: Any,
    ) -> None:
        self.out_dir = Path(out_dir)
        self.settings = RecordSettings(
            wait=wait,
            warmup=warmup,
            active=active,
            repeat=repeat,
            skip_first=skip_first,
            record_shapes=record_shapes,
            profile_memory=profile_memory,
            with_stack=with_stack,
            with_modules=with_modules,
            with_flops=with_flops,
            lines=lines,
            activities=activities,
            every=every,
            every_epochs=every_epochs,
            experimental=dict(experimental),
        )
        self.settings.validate()
        self.auto_step = auto_step
        self.recorder: Recorder | None = None
        self.result: RunResult | None = None
        self._calls = 0

    def __enter__(self) -> profile:
        self.recorder = Recorder(self.out_dir, self.settings, auto_step=self.auto_step).start()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        assert self.recorder is not None
        if exc_type is None:
            self.result = self.recorder.stop("completed", 0)
        elif issubclass(exc_type, KeyboardInterrupt):
            self.result = self.recorder.stop("interrupted", 130)
        else:
            self.result = self.recorder.stop("failed", 1)

    def step(self) -> None:
        """End the current step."""
        if self.recorder is None:
            raise RecordError("profile.step() called outside the profile block")
        self.recorder.step()

    def __call__(self, fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            self._calls += 1
            out = self.out_dir
            if self._calls > 1:
                out = out.with_name(f"{out.name}-{self._calls}")
            inner = replace(self.settings)
            session = profile.__new__(profile)
            session.__dict__.update(self.__dict__)
            session.out_dir, session.settings = out, inner
            with session:
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


def step() -> None:
    """End the current step of the innermost active recording; a no-op when none is active.

    Scripts can call ``opscope.step()`` unconditionally: it does nothing outside a recording, and
    under ``opscope record`` it replaces optimizer-step detection.
    """
    if _ACTIVE:
        _ACTIVE[-1].step(source="user")
