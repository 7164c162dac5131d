"""Reliability of ``minidp.DistributedDataParallel``: the cases a fault-and-bad-input review
and a mutation run found, each against torch's DDP (or torch's own bucket assignment).

* a collective *inside backward* (an ``autograd.Function`` that all-reduces its gradient)
  trains bit-identically to torch DDP: DDP's bucket traffic runs in a channel of its own;
* a bucket that reaches its cap exactly closes there, as torch's assignment does;
* ``find_unused_parameters=True`` with a forward that returns a parameter itself;
* buffers are broadcast at construction: ranks agree before any forward, like torch;
* complex parameters, buffers that differ across ranks, a rank outside the group: clear
  errors at construction, naming what is wrong.

Run: ``pytest tests/test_reliability_ddp.py``
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from test_ddp_support import _diffs

import minidp
from minidp.ddp import compute_bucket_assignment_by_size

# ---- a collective inside backward -------------------------------------------------------


class SumGradients(torch.autograd.Function):
    """Identity forward; backward sums the gradient over the ranks (a model-parallel
    "copy to region" layer). ``ours`` picks minidp's all-reduce or torch's."""

    @staticmethod
    def forward(ctx, x, ours: bool):
        ctx.ours = ours
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous().clone()
        if ctx.ours:
            minidp.comm.all_reduce(grad)
        else:
            dist.all_reduce(grad)
        return grad, None


class CollectiveInBackward(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = nn.Linear(16, 64), nn.Linear(64, 64), nn.Linear(64, 4)
        self.ours = False

    def forward(self, x):
        h = SumGradients.apply(F.relu(self.a(x)), self.ours)
        h = SumGradients.apply(F.relu(self.b(h)), self.ours)
        return self.c(h)


CAPS = (None, 0.0001)  # one bucket at first; after the rebuild 1, or 5 (0.001 MiB: 3)


def _train_with_collective_in_backward(rank: int, world: int, cap, checked: bool) -> list:
    torch.manual_seed(3)
    model = CollectiveInBackward()
    with torch.no_grad():  # ranks start different: the constructor's broadcast must fix it
        for p in model.parameters():
            p.add_(0.01 * rank)
    kwargs = {} if cap is None else {"bucket_cap_mb": cap}
    m_ref, m_ours = copy.deepcopy(model), copy.deepcopy(model)
    m_ours.ours = True
    ref = nn.parallel.DistributedDataParallel(m_ref, **kwargs)
    ours = minidp.DistributedDataParallel(m_ours, **kwargs)
    opts = [torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9) for m in (m_ref, m_ours)]
    g = torch.Generator().manual_seed(100 + rank)
    diffs = []
    for step in range(3):  # the buckets are rebuilt at the 2nd forward
        x, y = torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)
        for ddp, opt in zip((ref, ours), opts):
            opt.zero_grad()
            with minidp.comm.checked(checked and ddp is ours):
                F.mse_loss(ddp(x), y).backward()
            opt.step()
        diffs += _diffs(step, m_ref, m_ours)
    return diffs[:10]


def _collective_in_backward(rank: int, world: int) -> dict:
    train = _train_with_collective_in_backward
    out = {(cap, False): train(rank, world, cap, False) for cap in CAPS}
    out[0.001, True] = train(rank, world, 0.001, True)
    dist.barrier()
    return out


@pytest.mark.parametrize("world", [2, 3])
def test_collective_inside_backward_matches_torch_ddp(process_world, world):
    """Bit for bit with torch DDP, every step, for every bucket size and in checked mode
    (which numbers DDP's channel and the user's separately)."""
    for rank, results in enumerate(process_world(world).run(_collective_in_backward)):
        for (cap, checked), diffs in results.items():
            assert diffs == [], f"rank {rank}, bucket_cap_mb={cap}, checked={checked}: {diffs}"


# ---- buckets: a bucket that reaches its cap exactly --------------------------------------


@pytest.mark.parametrize(
    "numels, limits",
    [([4] * 5, [32]), ([2, 6, 8, 8, 1], [32, 64]), ([8, 8, 8], [64, 32]), ([1] * 9, [4, 8])],
)
def test_bucket_reaching_its_cap_exactly_closes_like_torch(numels, limits):
    tensors = [torch.zeros(n) for n in numels]  # float32: 4 bytes an element
    ours = compute_bucket_assignment_by_size(tensors, limits)
    theirs = dist._compute_bucket_assignment_by_size(tensors, limits)
    assert ours == (theirs[0], theirs[1])
    # the case under test happens: some bucket holds exactly its limit
    assert any(sum(numels[i] * 4 for i in b) == lim for b, lim in zip(*ours))


# ---- find_unused_parameters with a parameter as output -----------------------------------


class ParameterOut(nn.Module):
    """Returns a parameter *itself* (no grad_fn) beside a computed output; one layer is
    never used. ``through_view``: return ``scale.view_as(scale)`` instead — the same
    values and gradients, but reached through a graph node."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(6, 3)
        self.scale = nn.Parameter(torch.linspace(0.5, 1.5, 3))
        self.never = nn.Linear(6, 3)
        self.through_view = False

    def forward(self, x):
        return self.lin(x), self.scale.view_as(self.scale) if self.through_view else self.scale


def _parameter_out(rank: int, world: int) -> list:
    """torch DDP itself raises for the bare parameter ("marked as ready twice": its graph
    walk starts only from outputs with a grad_fn), so its reference run returns the view;
    minidp counts the bare parameter as used and must train exactly the same."""
    torch.manual_seed(4)
    model = ParameterOut()
    m_ref, m_ours = copy.deepcopy(model), copy.deepcopy(model)
    m_ref.through_view = True
    ref = nn.parallel.DistributedDataParallel(m_ref, find_unused_parameters=True)
    ours = minidp.DistributedDataParallel(m_ours, find_unused_parameters=True)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (m_ref, m_ours)]
    g = torch.Generator().manual_seed(rank)
    diffs = []
    for step in range(3):
        x = torch.randn(5, 6, generator=g)
        for ddp, opt in zip((ref, ours), opts):
            opt.zero_grad()
            out, scale = ddp(x)
            (out * scale).pow(2).mean().backward()
            opt.step()
        diffs += _diffs(step, m_ref, m_ours)
    return diffs


def test_find_unused_with_a_parameter_as_output_matches_torch(process_world):
    assert process_world(2).run(_parameter_out) == [[], []]


# ---- buffers at construction ------------------------------------------------------------


def _buffers_at_construction(rank: int, world: int) -> list:
    torch.manual_seed(5)
    model = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6))
    with torch.no_grad():  # every rank has its own running statistics
        model[1].running_mean.fill_(float(rank + 1))
        model[1].running_var.fill_(float(10 * rank + 2))
        model[1].num_batches_tracked.fill_(rank + 7)
    m_ref, m_ours = copy.deepcopy(model), copy.deepcopy(model)
    nn.parallel.DistributedDataParallel(m_ref)
    minidp.DistributedDataParallel(m_ours)
    # before any forward: torch's and ours hold rank 0's buffers on every rank
    return [
        (name, torch.equal(a, b), a.flatten()[0].item())
        for (name, a), b in zip(m_ref.named_buffers(), m_ours.buffers())
    ]


def test_buffers_are_broadcast_at_construction_like_torch(process_world):
    for per_rank in process_world(3).run(_buffers_at_construction):
        assert per_rank == [
            ("1.running_mean", True, 1.0),
            ("1.running_var", True, 2.0),
            ("1.num_batches_tracked", True, 7),
        ]


# ---- errors at construction -------------------------------------------------------------


def test_complex_parameters_fail_at_construction():
    model = nn.Linear(3, 3)
    model.weight = nn.Parameter(torch.randn(3, 3, dtype=torch.complex64))
    expected = r"parameter 'weight' is torch\.complex64 .*torch\.view_as_real"
    with pytest.raises(ValueError, match=expected):
        minidp.DistributedDataParallel(model)  # before any communication: no world needed


class WithBuffer(nn.Module):
    def __init__(self, buffer: torch.Tensor) -> None:
        super().__init__()
        self.lin = nn.Linear(2, 2)
        self.register_buffer("stats", buffer)


def _construction_errors(rank: int, world: int) -> dict:
    cases = {
        "shape": torch.zeros(3 if rank == 0 else 4),
        "dtype": torch.zeros(3, dtype=torch.float32 if rank == 0 else torch.float64),
    }
    out = {}
    for name, buffer in cases.items():
        try:
            minidp.DistributedDataParallel(WithBuffer(buffer))
        except RuntimeError as exc:
            out[name] = str(exc)
    sub = dist.new_group([1, 2])  # rank 0 is not a member
    if rank == 0:
        try:
            minidp.DistributedDataParallel(nn.Linear(2, 2), process_group=sub)
        except ValueError as exc:
            out["not a member"] = str(exc)
    dist.barrier()
    return out


def test_construction_errors_name_the_culprit(process_world):
    results = process_world(3).run(_construction_errors)
    for out in results:
        assert "buffer 'stats' has shape (4,) float32 on rank 1 and (3,) float32" in out["shape"]
        assert "buffer 'stats' has shape (3,) float64 on rank 1 and (3,) float32" in out["dtype"]
    assert "this rank is not in process_group" in results[0]["not a member"]
