"""Models and rank-side scenario code shared by the DDP tests (no tests in here).

Each scenario trains the same seeded model twice inside ONE rank process — once wrapped
in ``torch.nn.parallel.DistributedDataParallel``, once in ``minidp.DistributedDataParallel``
— on the same per-rank data, and after every optimizer step compares every parameter,
buffer and gradient with ``torch.equal``. Running both in the same process is what makes
bit-exactness testable: same libraries, same thread settings, same inputs.

Functions here run in the rank processes of ``process_world`` (they must be module-level).
"""

from __future__ import annotations

import contextlib
import copy

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks as torch_hooks

import minidp
from minidp.ddp import hooks as minidp_hooks


class MLP(nn.Module):
    def __init__(self, sizes=(16, 32, 32, 4)) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes, sizes[1:]))

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = F.relu(x)
        return x


class ConvBN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 6, 3), nn.BatchNorm2d(6), nn.ReLU(), nn.Conv2d(6, 8, 3), nn.BatchNorm2d(8)
        )
        self.head = nn.Linear(8 * 4 * 4, 4)

    def forward(self, x):
        return self.head(torch.flatten(F.relu(self.body(x)), 1))


class Tied(nn.Module):
    """Embedding and output projection share one weight; a frozen layer in the middle."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(20, 12)
        self.frozen = nn.Linear(12, 12)
        self.frozen.requires_grad_(False)
        self.mix = nn.Linear(12, 12)
        self.out = nn.Linear(12, 20, bias=False)
        self.out.weight = self.embed.weight  # tied

    def forward(self, tokens):
        h = self.embed(tokens).mean(1)
        return self.out(torch.tanh(self.mix(self.frozen(h))))


class Branchy(nn.Module):
    """``branch`` runs only when asked; ``never`` is never used by any rank."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(16, 24)
        self.branch = nn.Linear(24, 24)
        self.never = nn.Linear(24, 24)
        self.head = nn.Linear(24, 4)
        self.use_branch = True

    def forward(self, x):
        h = F.relu(self.inp(x))
        if self.use_branch:
            h = h + torch.tanh(self.branch(h))
        return self.head(h)


def _mlp_data(g):
    return torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)


def _conv_data(g):
    return torch.randn(4, 3, 8, 8, generator=g), torch.randn(4, 4, generator=g)


def _tied_data(g):
    return torch.randint(0, 20, (6, 5), generator=g), torch.randn(6, 20, generator=g)


# name -> (model class, data maker, DDP kwargs, options for the training loop)
SCENARIOS = {
    "mlp": (MLP, _mlp_data, {}, {}),
    "conv_bn": (ConvBN, _conv_data, {}, {"eval_forward_at": 2}),
    "tied_frozen": (Tied, _tied_data, {}, {}),
    "channels_last": (ConvBN, _conv_data, {"bucket_cap_mb": 0.001}, {"channels_last": True}),
    "many_buckets": (MLP, _mlp_data, {"bucket_cap_mb": 0.0001}, {}),
    "find_unused": (Branchy, _mlp_data, {"find_unused_parameters": True}, {"branch": True}),
    "no_sync": (ConvBN, _conv_data, {}, {"micro_batches": 3}),
    "no_sync_unused": (
        Branchy,
        _mlp_data,
        {"find_unused_parameters": True, "bucket_cap_mb": 0.001},
        {"micro_batches": 3, "branch": True},
    ),
    "grad_as_view": (MLP, _mlp_data, {"gradient_as_bucket_view": True}, {}),
    "grad_as_view_kept": (
        ConvBN,
        _conv_data,
        {"gradient_as_bucket_view": True, "bucket_cap_mb": 0.001},
        {"set_to_none": False, "micro_batches": 2},
    ),
    "allreduce_hook": (MLP, _mlp_data, {"bucket_cap_mb": 0.001}, {"hook": "allreduce"}),
    "fp16_hook": (ConvBN, _conv_data, {"bucket_cap_mb": 0.001}, {"hook": "fp16"}),
    # minidp-only options: same buckets launched after backward -> still bit-identical
    "no_overlap": (MLP, _mlp_data, {"bucket_cap_mb": 0.001}, {"minidp": {"overlap": False}}),
    # parameter server: rank 0 sums in rank order, so only 2 ranks (one addition) match
    "naive": (MLP, _mlp_data, {}, {"minidp": {"algorithm": "naive"}, "exact_up_to": 2}),
}


def _diffs(step: int, ref: nn.Module, mine: nn.Module) -> list:
    """Every parameter/buffer/gradient where the two models are not bit-identical."""
    out = []
    for (name, a), b in zip(ref.state_dict().items(), mine.state_dict().values()):
        if not torch.equal(a, b):
            out.append((step, name, "value", (a.double() - b.double()).abs().max().item()))
    for (name, a), b in zip(ref.named_parameters(), mine.parameters()):
        if (a.grad is None) != (b.grad is None):
            out.append((step, name, "grad None-ness", (a.grad is None, b.grad is None)))
        elif a.grad is not None and not torch.equal(a.grad, b.grad):
            out.append((step, name, "grad", (a.grad - b.grad).abs().max().item()))
    return out


def _layout(ddp, params) -> list[list[int]]:
    """torch's reducer buckets as parameter indices (test-only private API)."""
    index = {id(p): i for i, p in enumerate(params)}
    return [
        [index[id(p)] for p in b.parameters()] for b in ddp.reducer._get_zeros_like_grad_buckets()
    ]


def run_scenario(rank: int, world: int, name: str, steps: int = 5) -> dict:
    cls, data, kwargs, opts = SCENARIOS[name]
    torch.manual_seed(1234)
    model = cls()
    if opts.get("channels_last"):  # conv weights laid out NHWC: bucket slots follow memory
        model = model.to(memory_format=torch.channels_last)
    with torch.no_grad():  # ranks start different: the constructor's broadcast must fix it
        for p in model.parameters():
            p.add_(0.01 * rank)
    m_ref, m_mine = copy.deepcopy(model), copy.deepcopy(model)
    ref = nn.parallel.DistributedDataParallel(m_ref, **kwargs)
    mine = minidp.DistributedDataParallel(m_mine, **kwargs, **opts.get("minidp", {}))
    if opts.get("hook") == "allreduce":
        ref.register_comm_hook(None, torch_hooks.allreduce_hook)
        mine.register_comm_hook(None, minidp_hooks.allreduce_hook)
    elif opts.get("hook") == "fp16":
        ref.register_comm_hook(None, torch_hooks.fp16_compress_hook)
        mine.register_comm_hook(None, minidp_hooks.fp16_compress_hook)
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)
    opt_mine = torch.optim.SGD(mine.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(777 + rank)
    diffs = _diffs(-1, m_ref, m_mine)
    micro = opts.get("micro_batches", 1)
    for step in range(steps):
        batches = [data(g) for _ in range(micro)]
        eval_x = data(g)[0]
        for ddp, opt, module in ((ref, opt_ref, m_ref), (mine, opt_mine, m_mine)):
            opt.zero_grad(set_to_none=opts.get("set_to_none", True))
            if opts.get("branch"):  # rank r uses the branch at steps where (r + step) is even;
                # at step 3 nobody does (globally unused: .grad must stay None)
                module.use_branch = (rank + step) % 2 == 0 and step != 3
            if opts.get("eval_forward_at") == step:
                with torch.no_grad():  # train-mode BN: updates running stats locally
                    ddp(eval_x)
            for i, (x, y) in enumerate(batches):
                last = i == micro - 1
                with ddp.no_sync() if not last else contextlib.nullcontext():
                    loss = F.mse_loss(ddp(x), y)
                    loss.backward()
            opt.step()
        diffs += _diffs(step, m_ref, m_mine)
    params = [p for p in m_ref.parameters() if p.requires_grad]
    return {
        "diffs": diffs[:20],
        "torch_buckets": _layout(ref, params),
        "minidp_buckets": mine.reducer.assignment,
    }


def run_scenarios(rank: int, world: int, names: list[str]) -> dict:
    out = {name: run_scenario(rank, world, name) for name in names}
    out["allreduce_gradients"] = simple_vs_torch(rank, world)
    dist.barrier()
    return out


def simple_vs_torch(rank: int, world: int) -> list:
    """``minidp.ddp.allreduce_gradients`` after backward == torch DDP's first iteration
    (one bucket in parameter order, scaled by 1/world_size before the sum)."""
    torch.manual_seed(5)
    model = MLP()
    m_ref, m_mine = copy.deepcopy(model), copy.deepcopy(model)
    ref = nn.parallel.DistributedDataParallel(m_ref)
    x, y = _mlp_data(torch.Generator().manual_seed(rank))
    F.mse_loss(ref(x), y).backward()
    F.mse_loss(m_mine(x), y).backward()
    minidp.ddp.allreduce_gradients(m_mine)
    return _diffs(0, m_ref, m_mine)
