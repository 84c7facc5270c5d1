"""What counts as the user's code: the one rule every reader, analysis and the recorder use.

A frame is *model code* when it lies outside torch itself and the frameworks around it: the
user's own files, and the model libraries whose code is the model (``transformers``, ``timm``,
``diffusers``, ``megatron``, ``torchvision``'s models, ...). It is not model code when it is
torch or an extension of it (``torch_npu``, ``triton``, ``functorch``), a training framework
or utility (``lightning``, ``accelerate``, ``deepspeed``, ``tqdm``, ...), opscope itself, the
standard library, another installed package not named as a model library, or a built-in.

The innermost such frame of an op is "the line" the op is charged to, so a
``transformers/models/vit/modeling_vit.py`` line is shown for a HF model rather than the
outermost ``run_on_input`` of the user's script.

Configurable with two environment variables (comma-separated top-level package names):
``OPSCOPE_MODEL_PACKAGES`` adds installed packages whose code counts as model code;
``OPSCOPE_FRAMEWORK_PACKAGES`` adds packages (or top-level folders of relative paths) that
never count.

Paths come in two forms: Kineto names a file relative to the ``sys.path`` entry holding it
(``torch/nn/modules/linear.py``, ``threading.py``, ``model.py``); Ascend call stacks and the
recorder see absolute paths (``/usr/lib/python3.11/site-packages/torch/...``).
"""

from __future__ import annotations

import os
import re
import sys
from functools import lru_cache

CALL_SITE_PREFIX = "opscope.line: "
"""Name prefix of the recorder's call-site annotations (:mod:`opscope.record.callsites`)."""

MODEL_PACKAGES: frozenset[str] = frozenset(
    {
        "transformers",
        "timm",
        "diffusers",
        "megatron",
        "torchvision",
        "torchaudio",
        "torchtext",
        "peft",
        "open_clip",
        "mmdet",
        "mmseg",
        "mmcv",
        "fairseq",
        "vllm",
        "sglang",
        "xfuser",
    }
)
"""Installed libraries whose code is the model's (their lines are the ones to show)."""

FRAMEWORK_PACKAGES: frozenset[str] = frozenset(
    {
        "torch",
        "torch_npu",
        "functorch",
        "triton",
        "opscope",
        "numpy",
        "accelerate",
        "deepspeed",
        "lightning",
        "pytorch_lightning",
        "lightning_fabric",
        "apex",
        "fairscale",
        "typer",
        "click",
        "pytest",
        "_pytest",
        "pluggy",
        "tqdm",
        "safetensors",
        "tokenizers",
        "datasets",
        "huggingface_hub",
    }
)
"""Torch, its extensions, training frameworks and utilities: never the model's line."""

_STDLIB = frozenset(sys.stdlib_module_names)
_SITE = re.compile(r"(?:^|/)(?:site|dist)-packages/")
_LIBDIR = re.compile(r"/lib/python\d+(?:\.\d+)?/")
# Inductor's generated modules (TORCHINDUCTOR_CACHE_DIR, default /tmp/torchinductor_<user>/),
# seen as "/tmp/torchinductor_root/s4/cs46...nuhmg.py(798): call" in a recorded H200 trace
_GENERATED = re.compile(r"(?:^|/)torchinductor_[^/]*/|(?:^|/)inductor_cache/|/fx_graph_cache/")


def _env(name: str) -> frozenset[str]:
    return frozenset(p.strip() for p in os.environ.get(name, "").split(",") if p.strip())


def model_packages() -> frozenset[str]:
    """:data:`MODEL_PACKAGES` plus ``OPSCOPE_MODEL_PACKAGES``."""
    return MODEL_PACKAGES | _env("OPSCOPE_MODEL_PACKAGES")


def framework_packages() -> frozenset[str]:
    """:data:`FRAMEWORK_PACKAGES` plus ``OPSCOPE_FRAMEWORK_PACKAGES``, less
    ``OPSCOPE_MODEL_PACKAGES``."""
    return (FRAMEWORK_PACKAGES | _env("OPSCOPE_FRAMEWORK_PACKAGES")) - _env(
        "OPSCOPE_MODEL_PACKAGES"
    )


def is_model_file(file: str | None) -> bool:
    """True when a frame in ``file`` is model code (see the module's docstring)."""
    if not file:
        return False
    return _is_model(
        file,
        os.environ.get("OPSCOPE_MODEL_PACKAGES", ""),
        os.environ.get("OPSCOPE_FRAMEWORK_PACKAGES", ""),
    )


@lru_cache(maxsize=65536)
def _is_model(file: str, _model_env: str, _framework_env: str) -> bool:
    # (the environment strings are part of the cache key: a changed setting is seen)
    f = file.replace("\\", "/")
    if "opscope/demo/" in f:
        # the demo's built-in model stands for the user's model: its lines are the ones to show
        return True
    if f.startswith("<") or f.startswith("built-in"):
        return False
    if _GENERATED.search(f):
        return False  # code torch.compile wrote: the user's line is the compiled call's
    model, framework = model_packages(), framework_packages()
    site = list(_SITE.finditer(f))
    if site:
        rest = f[site[-1].end() :]
        return _top(rest) in model
    if _LIBDIR.search(f):
        return False  # the interpreter's own library
    parts = [p for p in f.split("/") if p]
    if not parts:
        return False
    if not f.startswith("/") and not re.match(r"^[A-Za-z]:/", f):
        top = _top(f)
        if top in model:
            return True
        if top in _STDLIB or top in framework:
            return False
        # multiprocessing/, concurrent/futures, ... relative to the stdlib folder
        return not (len(parts) > 1 and parts[0] in _STDLIB)
    # an absolute path outside site-packages: a source checkout or the user's project
    dirs = parts[:-1]
    for i, d in enumerate(dirs):
        if d in framework and (d != "opscope" or "demo" not in dirs[i + 1 : i + 2]):
            # a checkout of torch/opscope/...: unless a model package sits below it
            return any(x in model for x in dirs[i + 1 :])
    return True


def _top(rel: str) -> str:
    first = rel.split("/", 1)[0]
    return first[:-3] if first.endswith(".py") else first
