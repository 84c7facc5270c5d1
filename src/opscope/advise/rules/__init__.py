"""The built-in rules, one module per family; importing a module registers its rules."""

from opscope.advise.rules import (  # noqa: F401
    ascend_affinity,
    ascend_comm_alignment,
    ascend_comm_packet,
    ascend_dynamic_shape,
    ascend_fusible,
)
