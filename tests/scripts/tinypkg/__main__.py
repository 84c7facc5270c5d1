"""`python -m tinypkg`: a few SGD steps on a tiny model."""

import sys

import torch

model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
n = int(sys.argv[1]) if len(sys.argv) > 1 else 6
for _ in range(n):
    loss = model(torch.randn(7, 4)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("argv", sys.argv[1:], __name__)
