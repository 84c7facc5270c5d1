"""Trigger models and their fixed twins, one pair per rule. Tiny, CPU, deterministic.

Each ``make_*`` returns a ``step()`` callable that runs one training (or inference) step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

Step = Callable[[], Any]
torch.manual_seed(0)


class SeedLinear(nn.Module):
    """The seed's slow layer: transposed weight on each call, separate bias add."""

    def __init__(self, i: int, o: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(o, i) / i**0.5)
        self.bias = nn.Parameter(torch.zeros(o))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.matmul(x, self.weight.t())
        x += self.bias
        return x


class CopyLinear(SeedLinear):
    """A transposed weight made contiguous (a copy) on every call."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight.t().contiguous().t(), self.bias)


class FusedLinear(SeedLinear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)


def _train(model: nn.Module, x: torch.Tensor, opt: torch.optim.Optimizer | None = None) -> Step:
    opt = opt or torch.optim.SGD(model.parameters(), lr=1e-3, foreach=True)

    def step() -> None:
        opt.zero_grad()
        model(x).float().square().mean().backward()
        opt.step()

    return step


def seed_linear(fixed: bool) -> Step:
    return _train(FusedLinear(256, 128) if fixed else SeedLinear(256, 128), torch.randn(64, 256))


def copy_linear(fixed: bool) -> Step:
    return _train(FusedLinear(256, 128) if fixed else CopyLinear(256, 128), torch.randn(64, 256))


def alignment(fixed: bool) -> Step:
    return _train(nn.Linear(256, 1024 if fixed else 1000), torch.randn(64, 256))


class ActMLP(nn.Module):
    def __init__(self, fused: bool) -> None:
        super().__init__()
        self.fc = nn.Linear(256, 256)
        self.fused = fused

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fused:
            return torch._addmm_activation(self.fc.bias, x, self.fc.weight.t())
        return torch.relu(self.fc(x))


def activation(fixed: bool) -> Step:
    # inference: torch._addmm_activation has no derivative
    model, x = ActMLP(fixed), torch.randn(64, 256)

    def step() -> None:
        with torch.no_grad():
            model(x)

    return step


class Attn(nn.Module):
    def __init__(self, fused: bool) -> None:
        super().__init__()
        self.qkv = nn.Linear(64, 192)
        self.fused = fused

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, 4, 16).permute(2, 0, 3, 1, 4)
        if self.fused:
            return F.scaled_dot_product_attention(q, k, v)
        att = torch.softmax(q @ k.transpose(-2, -1) * 0.25, dim=-1)
        return att @ v


def attention(fixed: bool) -> Step:
    return _train(Attn(fixed), torch.randn(4, 32, 64))


def optimizer(fixed: bool) -> Step:
    model = nn.Sequential(*[nn.Linear(32, 32) for _ in range(8)])
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9, foreach=fixed)
    return _train(model, torch.randn(8, 32), opt)


class RMS(nn.Module):
    def __init__(self, fused: bool) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(256))
        self.fused = fused

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fused:
            return F.rms_norm(x, (256,), self.w, 1e-6)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.w


def rmsnorm(fixed: bool) -> Step:
    return _train(RMS(fixed), torch.randn(32, 256))


def precision(fixed: bool) -> Step:
    m = nn.Linear(128, 128)
    x = torch.randn(32, 128)
    if fixed:
        m, x = m.to(torch.bfloat16), x.to(torch.bfloat16)
    return _train(m, x)


class Sync(nn.Module):
    def __init__(self, fixed: bool) -> None:
        super().__init__()
        self.fc = nn.Linear(64, 64)
        self.fixed = fixed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        if self.fixed:
            return torch.where(y.sum() > 0, y, -y)
        if y.sum().item() > 0:
            return y
        return -y


def host_sync(fixed: bool) -> Step:
    return _train(Sync(fixed), torch.randn(16, 64))


def dispatch(fixed: bool) -> Step:
    xs = [torch.randn(4) for _ in range(500)]
    stacked = torch.stack(xs)
    w = torch.randn(4)

    def step() -> None:
        if fixed:
            stacked.mul(w).sum(0)
            return
        y = torch.zeros(4)
        for x in xs:
            y = y + x * w

    return step


#: Matmul passes per sample of the slow dataset: 16 samples x 4 passes make fetching ~40 % of the
#: step, 4x the rule's threshold, so a loaded machine slowing the model's compute more than the
#: fetch cannot hide it (at 2 passes, 24 %).
SAMPLE_PASSES = 4


class SlowData(torch.utils.data.Dataset[torch.Tensor]):
    def __len__(self) -> int:
        return 10_000

    def __getitem__(self, i: int) -> torch.Tensor:
        a = torch.randn(64, 64)
        for _ in range(SAMPLE_PASSES):
            a = torch.tanh(a @ a) * 0.1
        return a[0, :32]


def dataloader(fixed: bool) -> Step:
    model = nn.Sequential(
        nn.Linear(32, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 32)
    )
    loader: Any
    if fixed:
        # pre-processed data, fetched a whole batch per index (one op, no per-sample work)
        data = torch.utils.data.TensorDataset(torch.randn(10_000, 32))
        sampler = torch.utils.data.BatchSampler(
            torch.utils.data.SequentialSampler(data), batch_size=16, drop_last=True
        )
        loader = torch.utils.data.DataLoader(data, sampler=sampler, batch_size=None)
    else:
        loader = torch.utils.data.DataLoader(SlowData(), batch_size=16, num_workers=0)
    it = iter(loader)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, foreach=True)

    def step() -> None:
        b = next(it)
        b = b[0] if isinstance(b, list | tuple) else b
        opt.zero_grad()
        model(b).square().mean().backward()
        opt.step()

    return step


def float64(fixed: bool) -> Step:
    m = nn.Linear(64, 64)
    x = torch.randn(16, 64)
    if not fixed:
        m, x = m.double(), x.double()
    return _train(m, x)


def churn(fixed: bool) -> Step:
    x = torch.randn(512)
    buf = torch.empty(512)

    def step() -> None:
        if fixed:
            for _ in range(1200):
                torch.mul(x, 1.0001, out=buf)
            return
        for _ in range(1200):
            x.mul(1.0001)

    return step


def kept_alive(fixed: bool) -> Step:
    model = nn.Linear(512, 512)
    x = torch.randn(1024, 512)
    history: list[Any] = []

    def step() -> None:
        out = model(x).mean()
        y = model(x) * 2  # a [1024, 512] activation (2 MiB)
        history.append(float(y.mean()) if fixed else y)
        out.backward()

    return step
