"""model.json: the structure of the first top-level ``nn.Module`` the script runs.

A global forward pre-hook catches the first module call that owns parameters (the outermost
module of that call, since pre-hooks fire parent first); it is then removed so the rest of the
run keeps PyTorch's hook-free fast path. A hook on that root module alone reads the batch size.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any


def _dtype(d: Any) -> str:
    return str(d).removeprefix("torch.")


def describe(root: Any) -> dict[str, Any]:
    """The model.json document for ``root`` (an nn.Module)."""
    cls = type(root)
    modules = []
    listing = []
    total = 0
    for path, mod in root.named_modules():
        params = list(mod.named_parameters(recurse=False))
        shapes = {n: list(p.shape) for n, p in params}
        count = sum(int(p.numel()) for _, p in params)
        total += count
        mcls = type(mod)
        tname = f"{mcls.__module__}.{mcls.__qualname__}"
        modules.append(
            {
                "path": path,
                "type": tname,
                "params": count,
                "param_shapes": shapes,
                "dtypes": sorted({_dtype(p.dtype) for _, p in params}),
                "contiguous": all(p.is_contiguous() for _, p in params),
            }
        )
        listing.append([path, tname, shapes])
    digest = hashlib.sha256(json.dumps(listing, sort_keys=True).encode()).hexdigest()
    return {
        "root_type": f"{cls.__module__}.{cls.__qualname__}",
        "total_params": total,
        "structure_hash": digest,
        "modules": modules,
    }


class ModelWatcher:
    """Finds the root module and counts the samples its forward calls see."""

    def __init__(self, on_root: Callable[[Any], None]) -> None:
        self._on_root = on_root
        self._global: Any = None
        self._local: Any = None
        self.root: Any = None
        self._tensor: Any = None
        self.samples = 0

    def arm(self) -> None:
        """Install the global pre-hook that waits for the first top-level module."""
        from torch.nn.modules.module import register_module_forward_pre_hook

        self._global = register_module_forward_pre_hook(self._first_call)

    def attach(self, root: Any) -> None:
        """Use ``root`` as the model (callbacks know it); write its structure."""
        if self.root is not None:
            return
        if self._global is not None:
            self._global.remove()
            self._global = None
        import torch

        self.root = root
        self._tensor = torch.Tensor
        self._local = root.register_forward_pre_hook(self._count, with_kwargs=True)
        self._on_root(root)

    def _first_call(self, module: Any, args: tuple[Any, ...]) -> None:
        if self.root is None and next(module.parameters(), None) is not None:
            self.attach(module)
            self._count(module, args, {})

    def _count(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        # Runs in every forward call of the model: the common call, model(batch), is tested first.
        if args and isinstance(args[0], self._tensor):
            v = args[0]
        else:
            v = next((x for x in (*args, *kwargs.values()) if isinstance(x, self._tensor)), None)
            if v is None:
                return
        if v.dim() > 0:
            self.samples += int(v.shape[0])

    def take_samples(self) -> int:
        """Samples seen since the last call."""
        n, self.samples = self.samples, 0
        return n

    def disarm(self) -> None:
        """Remove every hook."""
        for h in (self._global, self._local):
            if h is not None:
                h.remove()
        self._global = self._local = None
