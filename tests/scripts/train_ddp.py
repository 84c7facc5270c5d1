"""Two-rank gloo DDP training on a tiny model (run under torchrun)."""

import torch
import torch.distributed as dist
from torch import nn

dist.init_process_group("gloo")
model = nn.parallel.DistributedDataParallel(nn.Linear(4, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(6):
    loss = model(torch.randn(3, 4)).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
dist.destroy_process_group()
