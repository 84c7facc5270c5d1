"""The demo's built-in "vision model" and its fixed twin.

This file ships in the package so that the source lines opscope reports for the demo are real.
``VisionModel.linear_11`` is written the way the seed article found it: the weight is stored
``[out, in]`` and transposed on every call (``weight.t()`` makes a non-contiguous view that the
matmul must handle), and the bias is added in a separate in-place op instead of being fused. The
classifier head has 1000 outputs, which is not a multiple of 128 (the alignment rule of Ascend's
cube units and a comfortable multiple for tensor cores).

``FixedVisionModel`` is the same network after the fixes opscope proposes: weights stored
pre-transposed and contiguous, ``F.linear`` with the bias fused, and the head padded to 1024
outputs (the extra 24 logits are sliced off, so the model computes the same function).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

HIDDEN = 1024
NARROW = 256  # linear_11 maps HIDDEN -> NARROW: activations [256, 1024] x [1024, 256]
CLASSES = 1000
PADDED_CLASSES = 1024  # next multiple of 128
DEPTH = 12  # linear_0 .. linear_11
IMAGE = 32  # input images are [batch, 3, IMAGE, IMAGE]


class SeedLinear(nn.Module):
    """The slow layer, as written in the seed: transposed weight on every call, separate bias."""

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_features, in_features) / in_features**0.5)
        self.bias = nn.Parameter(torch.zeros(out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.matmul(x, self.weight.t())
        x += self.bias
        return x


class Stem(nn.Module):
    """A small convolutional stem: [B, 3, 32, 32] -> [B, HIDDEN]."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 16, kernel_size=3, stride=2, padding=1)
        self.act = nn.ReLU()
        self.proj = nn.Linear(16 * (IMAGE // 2) ** 2, HIDDEN)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.act(self.conv(x))
        return torch.relu(self.proj(x.flatten(1)))


class VisionModel(nn.Module):
    """The original model: a stem, eleven plain linear layers, the seed's ``linear_11``, a head."""

    def __init__(self, layer_11: type[nn.Module] = SeedLinear, head_out: int = CLASSES) -> None:
        super().__init__()
        self.stem = Stem()
        for i in range(DEPTH - 1):
            setattr(self, f"linear_{i}", nn.Linear(HIDDEN, HIDDEN))
        self.linear_11 = layer_11(HIDDEN, NARROW)
        self.head = nn.Linear(NARROW, head_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for i in range(DEPTH - 1):
            x = torch.relu(getattr(self, f"linear_{i}")(x))
        x = self.linear_11(x)
        out: torch.Tensor = self.head(torch.relu(x))
        return out[:, :CLASSES]  # the fixed twin's padded logits are sliced off here


class FusedLinear(nn.Module):
    """The fixed layer: weight kept contiguous in the ``[out, in]`` layout ``F.linear`` wants,
    bias fused into the matmul."""

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_features, in_features) / in_features**0.5)
        self.bias = nn.Parameter(torch.zeros(out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)


class FixedVisionModel(VisionModel):
    """The fixed twin: the same function, with linear_11 fused and the head aligned to 1024."""

    def __init__(self) -> None:
        super().__init__(layer_11=FusedLinear, head_out=PADDED_CLASSES)


def make_batch(batch: int, device: Any, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A deterministic synthetic batch of images and labels."""
    g = torch.Generator().manual_seed(seed)
    images = torch.randn(batch, 3, IMAGE, IMAGE, generator=g)
    labels = torch.randint(0, CLASSES, (batch,), generator=g)
    return images.to(device), labels.to(device)
