"""What the DDP exercises share: float64 models and data from explicit generators. From 3
ranks torch's buckets decide the summation order (< 1e-15 apart): rtol 1e-12."""

import torch
from torch import nn

from minidp.tools.exercise.inputs import spare

TOL = (1e-12, 1e-15)  # float64; only the summation order may differ (see above)
# world 2 first: the mistakes show from 2 ranks on; then a subgroup of 2 in a world of 3
CASES = ({"world": 2, "seed": 0}, {"world": 3, "seed": 1}, {"world": 1, "seed": 2},
         {"world": 2, "seed": 3, "spare": 1})  # fmt: skip
DDP_ANSWERS = ("minidp.ddp.simple", "minidp.textbook.ddp", "minidp.ddp.buckets",
               "minidp.ddp.distributed.DistributedDataParallel")  # fmt: skip
MLP_GRAD_ELEMENTS = 147  # 5*8+8 + 8*8+8 + 8*3+3: what one all-reduce of every gradient moves


def draw(rng, **more) -> dict:
    """World 1..3, rows 1..8, a subgroup 1 in 4, ``more``: key -> a function of the rng."""
    case = {"world": rng.randint(1, 3), "seed": rng.randint(0, 99), "rows": rng.randint(1, 8)}
    case.update({k: f(rng) for k, f in more.items()})
    return {**case, **spare(rng)}


def warm() -> None:
    """``Exercise.prepare``: a process's first optimizer imports ``torch._dynamo`` (seconds)."""
    torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)


class Branchy(nn.Module):
    """5 -> 3 like the MLP, as real models are: the first registered is used last (its gradient
    ready first), a layer runs twice, a frozen one sits at the end."""

    def __init__(self) -> None:
        super().__init__()  # (assigned left to right: registered in this order)
        self.head, self.embed, self.mid = nn.Linear(8, 3), nn.Linear(5, 8), nn.Linear(8, 8)
        self.frozen = nn.Linear(3, 3).requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (rows, 5) -> (rows, 3)
        h = torch.tanh(self.mid(torch.tanh(self.mid(torch.tanh(self.embed(x))))))
        return self.frozen(self.head(h))


def model(case) -> nn.Module:
    """float64 MLP 5 -> 8 -> 8 -> 3 (or ``Branchy``), the same on every rank."""
    g = torch.Generator().manual_seed(500 + case["seed"])
    m = Branchy() if case.get("model") == "branchy" else nn.Sequential(
        nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 3))  # fmt: skip
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)
    return m.double()


def data(case, rank: int, step: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(case["seed"] * 7919 + rank * 101 + step)
    rows = case.get("rows", 6)  # this rank's batch
    return (torch.randn(rows, 5, generator=g, dtype=torch.float64),
            torch.randn(rows, 3, generator=g, dtype=torch.float64))  # fmt: skip


loss = lambda m, batch: nn.functional.mse_loss(m(batch[0]), batch[1])
grads = lambda m: [None if p.grad is None else p.grad.detach().to("cpu", copy=True)
                   for p in m.parameters()]  # fmt: skip
names = lambda m, what="gradient": [f"{n}'s {what}" for n, _ in m.named_parameters()]
