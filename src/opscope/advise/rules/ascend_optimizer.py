"""torch_npu's fused optimizers: the Ascend fix of ``fusion-optimizer-foreach``.

msprof-analyze's advisor (its optimizer advice and the ``Optimizer`` section of its fusion-op
table, read for what they say, not copied) names a torch_npu fused optimizer for each
``Optimizer.step#<Name>.step`` range it finds: ``torch_npu.optim.NpuFused<Name>``, which keeps
the parameters, gradients and states in a few flat buffers and updates them with one op per
kind. ``torch.optim.<Name>(foreach=True)`` (multi-tensor ``aclnnForeach*`` kernels) is the
portable alternative.
"""

from __future__ import annotations

from typing import Final

# The optimizers msprof-analyze maps to a torch_npu fused one (torch_npu.optim.NpuFused<Name>).
NPU_FUSED: Final = frozenset(
    {"SGD", "Adadelta", "Lamb", "Adam", "AdamW", "AdamP", "BertAdam", "RMSprop", "RMSpropTF"}
)


def npu_fix(opt: str) -> str:
    """The fix snippet for optimizer class ``opt`` on Ascend."""
    foreach = f"opt = torch.optim.{opt}(model.parameters(), lr=lr, foreach=True)"
    if opt not in NPU_FUSED:
        return foreach + "  # multi-tensor aclnnForeach kernels on Ascend"
    return (
        f"opt = torch_npu.optim.NpuFused{opt}(model.parameters(), lr=lr)  # flat buffers, "
        "one op per kind\n# or, portable: " + foreach
    )
