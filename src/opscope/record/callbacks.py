"""Framework callbacks: the same recording inside PyTorch Lightning and Hugging Face loops.

``opscope.record.callbacks.LightningCallback(out_dir, **profile_kwargs)`` and
``opscope.record.callbacks.HFCallback(out_dir, **profile_kwargs)`` take the keywords of
:func:`opscope.profile`. The classes are built on first access so that neither framework is
imported unless used. A step is one training batch (Lightning) / one optimizer step (HF).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from opscope.record.api import Recorder, profile


def _settings(out_dir: str | Path, kwargs: dict[str, Any]) -> profile:
    return profile(out_dir, **kwargs)


def _lightning_class() -> type:
    try:
        from lightning.pytorch import Callback
    except ImportError:
        from pytorch_lightning import Callback  # type: ignore[assignment]

    class LightningCallback(Callback):  # type: ignore[misc]
        """Records ``on_train_start`` … ``on_train_end``; one step per training batch."""

        def __init__(self, out_dir: str | Path, **kwargs: Any) -> None:
            self._p = _settings(out_dir, kwargs)
            self.recorder: Recorder | None = None

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            self.recorder = Recorder(self._p.out_dir, self._p.settings).start()
            self.recorder.attach_model(pl_module)

        def on_train_batch_end(self, trainer: Any, pl_module: Any, *args: Any) -> None:
            if self.recorder is not None:
                self.recorder.step()

        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            if self.recorder is not None:
                self.recorder.stop("completed", 0)
                self.recorder = None

        def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
            if self.recorder is not None:
                interrupted = isinstance(exception, KeyboardInterrupt)
                self.recorder.stop("interrupted" if interrupted else "failed", 1)
                self.recorder = None

    return LightningCallback


def _hf_class() -> type:
    from transformers import TrainerCallback

    class HFCallback(TrainerCallback):  # type: ignore[misc]
        """Records ``on_train_begin`` … ``on_train_end``; one step per optimizer step."""

        def __init__(self, out_dir: str | Path, **kwargs: Any) -> None:
            self._p = _settings(out_dir, kwargs)
            self.recorder: Recorder | None = None

        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.recorder = Recorder(self._p.out_dir, self._p.settings).start()
            if kw.get("model") is not None:
                self.recorder.attach_model(kw["model"])

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if self.recorder is not None:
                self.recorder.step()

        def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if self.recorder is not None:
                self.recorder.stop("completed", 0)
                self.recorder = None

    return HFCallback


_BUILDERS = {"LightningCallback": _lightning_class, "HFCallback": _hf_class}
_BUILT: dict[str, type] = {}


def __getattr__(name: str) -> Any:
    if name not in _BUILDERS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name not in _BUILT:
        _BUILT[name] = _BUILDERS[name]()
    return _BUILT[name]
