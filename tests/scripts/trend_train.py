"""Tiny training loop for the trend tests: optional planted slowdown from a known step.

Every step runs ``BASE`` tanh passes over 512x512 (~9 ms on one core); from ``--slow-from K``
on, also ``--extra`` 256x256 matmuls (~0.4 ms each: the planted regression stands clear of
noise); without it every step does the same work. No opscope imports: it is recorded.
"""

from __future__ import annotations

import argparse
import sys

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(32, 64)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(64, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


#: Elementwise passes every step does: a step of a few ms, so that sub-millisecond
#: disturbances on a shared machine (cache and allocator effects after each profiled
#: sample) stay far below the 25%
#: shift a change point needs.
BASE = 10


def train(steps: int, slow_from: int = -1, extra: int = 40, base: int = BASE) -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    m = torch.randn(256, 256)
    w = torch.randn(512, 512)
    for i in range(steps):
        x = torch.randn(16, 32)
        loss = model(x).sum()
        z = w
        for _ in range(base):  # steady work that is not a matmul: the planted op stays visible
            z = torch.tanh(z)
        loss = loss + z.sum() * 0.0
        if 0 <= slow_from <= i:
            y = m
            for _ in range(extra):
                y = torch.mm(y, m) * 1e-3
            loss = loss + y.sum() * 0.0
        opt.zero_grad()
        loss.backward()
        opt.step()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--slow-from", type=int, default=-1)
    ap.add_argument("--extra", type=int, default=40)
    a = ap.parse_args()
    train(a.steps, a.slow_from, a.extra)
    return 0


if __name__ == "__main__":
    sys.exit(main())
