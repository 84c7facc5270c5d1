"""A model whose matmul, bias add and linear layer are on three different lines (the line numbers
are read by tests/test_callsites.py from the markers at the ends of the lines)."""

from __future__ import annotations

import torch


class TwoLines(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(48, 32))
        self.bias = torch.nn.Parameter(torch.randn(48))
        self.head = torch.nn.Linear(48, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.matmul(x, self.weight.t())  # LINE:matmul
        y = y + self.bias  # LINE:bias
        return self.head(y)  # LINE:head


def train(steps: int, prof: object | None = None) -> None:
    torch.manual_seed(0)
    model = TwoLines()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(16, 32)
    for _ in range(steps):
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if prof is not None:
            prof.step()  # type: ignore[attr-defined]
