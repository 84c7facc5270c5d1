"""Tiny training script recorded by the tests (no opscope imports)."""

import argparse
import sys

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(16, 4, bias=False)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--batch", type=int, default=5)
    ap.add_argument("--crash-at", type=int, default=-1)
    ap.add_argument("--exit-code", type=int, default=0)
    ap.add_argument("--forever", action="store_true")
    ap.add_argument("--argv-out", default="")
    a = ap.parse_args()
    if a.argv_out:
        with open(a.argv_out, "w") as f:
            f.write(repr([sys.argv, __name__]))
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    i = 0
    while a.forever or i < a.steps:
        if i == a.crash_at:
            raise ValueError(f"boom at step {i}")
        x = torch.randn(a.batch, 8)
        loss = model(x).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {i}", flush=True)
        i += 1
    return a.exit_code


if __name__ == "__main__":
    sys.exit(main())
