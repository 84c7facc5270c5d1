"""Periodic sampling: when to open a sample of ``warmup + active`` steps with the profiler on.

``every=N``: samples start at steps ``wait``, ``wait + N``, ``wait + 2N``, ...
``every_epochs=N``: a sample starts ``wait`` steps into epochs 0, N, 2N, ...; an epoch ends when the
training DataLoader (the one last read from before the first step) is exhausted, detected by
wrapping ``_BaseDataLoaderIter.__next__`` for the duration of the run.
"""

from __future__ import annotations

from typing import Any


class EpochTracker:
    """Counts exhaustions of the training DataLoader."""

    def __init__(self) -> None:
        self.epoch = 0
        self.steps_in_epoch = 0
        self._last_key: int | None = None
        self._train_key: int | None = None
        self._orig: Any = None
        # called when an epoch ends (before the next epoch's first batch is fetched)
        self.on_epoch: Any = None

    def install(self) -> None:
        """Wrap the DataLoader iterator's ``__next__``."""
        from torch.utils.data import dataloader

        cls: Any = dataloader._BaseDataLoaderIter
        orig = cls.__next__
        self._orig = orig
        tracker = self

        def __next__(it: Any) -> Any:
            key = id(it._dataset)
            try:
                batch = orig(it)
            except StopIteration:
                if key == tracker._train_key:
                    tracker.epoch += 1
                    tracker.steps_in_epoch = 0
                    if tracker.on_epoch is not None:
                        tracker.on_epoch()
                raise
            tracker._last_key = key
            return batch

        cls.__next__ = __next__

    def on_step(self) -> None:
        """A training step ended: the loader last read from is the training loader."""
        if self._train_key is None:
            self._train_key = self._last_key
        self.steps_in_epoch += 1

    def uninstall(self) -> None:
        """Restore the original ``__next__``."""
        if self._orig is not None:
            from torch.utils.data import dataloader

            cls: Any = dataloader._BaseDataLoaderIter
            cls.__next__ = self._orig
            self._orig = None


class LoaderLength:
    """The training DataLoader's length in batches (its steps per epoch), when it has one.

    Wraps ``DataLoader.__iter__`` (called once per epoch, not per batch): the loader whose
    iterator was made last before the first step ended is the training loader. Iterable-style
    datasets have no length: then nothing is known.
    """

    def __init__(self) -> None:
        self.steps_per_epoch: int | None = None
        self._last: int | None = None
        self._decided = False
        self._orig: Any = None

    def install(self) -> None:
        """Wrap ``DataLoader.__iter__``."""
        from torch.utils.data import DataLoader

        orig = DataLoader.__iter__
        self._orig = orig
        watcher = self

        def __iter__(loader: Any) -> Any:
            it = orig(loader)
            if not watcher._decided:
                try:
                    watcher._last = len(loader)
                except TypeError:  # an IterableDataset without __len__
                    watcher._last = None
            return it

        DataLoader.__iter__ = __iter__  # type: ignore[method-assign]

    def on_step(self) -> None:
        """The first step ended: its loader is the training loader."""
        if not self._decided:
            self._decided = True
            self.steps_per_epoch = self._last
            self.uninstall()

    def uninstall(self) -> None:
        """Restore ``DataLoader.__iter__``."""
        if self._orig is not None:
            from torch.utils.data import DataLoader

            DataLoader.__iter__ = self._orig  # type: ignore[method-assign]
            self._orig = None


class SamplePlan:
    """Decides, at each step boundary, whether a sample starts at the next step."""

    def __init__(self, wait: int, every: int | None, every_epochs: int | None) -> None:
        self.wait = wait
        self.every = every
        self.every_epochs = every_epochs
        self.epochs = EpochTracker() if every_epochs else None
        self._sampled_epoch = -1

    def starts_at(self, step: int) -> bool:
        """Whether a sample should start at ``step`` (the step about to begin)."""
        if self.every:
            return step >= self.wait and (step - self.wait) % self.every == 0
        if self.epochs is not None and self.every_epochs:
            e = self.epochs.epoch
            due = e % self.every_epochs == 0 and e != self._sampled_epoch
            if due and self.epochs.steps_in_epoch >= self.wait:
                self._sampled_epoch = e
                return True
        return False


def release(prof: Any) -> None:
    """Free a stopped profiler's results now, by reference counting.

    ``torch.profiler.profile`` keeps every event of its last cycle (``profiler.kineto_results``)
    and sits in a reference cycle (``action_map`` holds its bound methods), so dropping the last
    reference to it freed nothing: each sample's results stayed in memory until a full GC ran,
    at some later unprofiled step, which then paid for freeing them. Cutting both links frees
    them in the step that saved the trace. Other profiler classes (torch_npu's) are left alone.
    """
    import torch.profiler as tp

    if not isinstance(prof, tp.profile):
        return
    state = vars(prof)
    for name in ("profiler", "action_map"):
        if name in state:
            state[name] = None
