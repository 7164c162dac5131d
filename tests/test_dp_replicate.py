"""replicate + Broadcast: sharing, copies, detached buffers, gradient sums in device order.

Run: ``pytest tests/test_dp_replicate.py``

What torch's ``replicate`` guarantees (``torch/nn/parallel/replicate.py``) and what is
checked here: replica 0 shares storage with the model; other replicas hold copies;
buffers are detached; replicas expose no ``parameters()``; the backward of the broadcast
is ``((g0 + g1) + g2) + ...`` on device 0, accumulated into ``.grad``.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from minidp.dp import Broadcast, replicate
from minidp.dp.replicate import broadcast


def small_model() -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 5), nn.BatchNorm1d(5), nn.Linear(5, 2, bias=False))
    model.config = {"note": "shared, not copied"}  # a plain attribute
    return model


def test_replica_zero_shares_storage_others_are_copies():
    model = small_model()
    replicas = replicate(model, ["cpu"] * 3)
    w = model[0].weight
    assert replicas[0][0].weight.data_ptr() == w.data_ptr()
    for r in replicas[1:]:
        assert r[0].weight.data_ptr() != w.data_ptr() and torch.equal(r[0].weight, w)
    # non-leaf tensors with the broadcast as history; a replica has no parameters
    assert all(type(r[0].weight.grad_fn).__name__ == "BroadcastBackward" for r in replicas)
    assert all(list(r.parameters()) == [] for r in replicas)
    assert replicas[2][2].bias is None  # an absent parameter stays None


def test_replicas_are_cheap_views_not_deep_copies():
    model = small_model()
    calls = []
    model[0].register_forward_hook(lambda m, i, o: calls.append(m))
    replicas = replicate(model, ["cpu"] * 2)
    for r in replicas:
        assert r is not model and r[0] is not model[0]
        assert r.config is model.config  # the same object, not a copy
        r(torch.randn(3, 4))
    assert calls == [replicas[0][0], replicas[1][0]]  # hooks are shared, run per replica


def test_buffers_detached_replica_zero_keeps_the_originals():
    model = small_model()
    replicas = replicate(model, ["cpu"] * 3)
    bn = model[1]
    assert replicas[0][1].running_mean is bn.running_mean
    assert replicas[1][1].running_mean is not bn.running_mean
    assert not any(r[1].running_var.requires_grad for r in replicas)
    before = bn.running_mean.clone()
    replicas[1](torch.randn(6, 4))  # lost with the replica
    assert torch.equal(bn.running_mean, before)
    replicas[0](torch.randn(6, 4))  # persists: replica 0's buffers are the model's
    assert not torch.equal(bn.running_mean, before)


def test_backward_sums_replica_grads_in_device_order():
    model = nn.Linear(4, 3)
    xs = [torch.randn(5, 4) * 10**k for k in range(4)]  # magnitudes make order visible
    replicas = replicate(model, ["cpu"] * 4)
    sum(r(x).pow(2).sum() for r, x in zip(replicas, xs)).backward()
    per = []
    for x in xs:
        twin = copy.deepcopy(model)
        twin.zero_grad()
        twin(x).pow(2).sum().backward()
        per.append(twin.weight.grad)
    in_order = ((per[0] + per[1]) + per[2]) + per[3]
    assert torch.equal(model.weight.grad, in_order)
    reversed_order = ((per[3] + per[2]) + per[1]) + per[0]
    assert not torch.equal(in_order, reversed_order)  # so the check above can fail


def test_tied_weights_stay_tied_in_each_replica():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = nn.Linear(4, 4, bias=False)
            self.dec = nn.Linear(4, 4, bias=False)
            self.dec.weight = self.enc.weight  # one parameter, two names

    model = Tied()
    for r in replicate(model, ["cpu"] * 2):
        assert r.enc.weight is r.dec.weight


def test_frozen_parameters_get_no_gradient():
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    model[0].weight.requires_grad_(False)
    replicas = replicate(model, ["cpu"] * 2)
    assert not replicas[1][0].weight.requires_grad
    sum(r(torch.randn(3, 4)).sum() for r in replicas).backward()
    assert model[0].weight.grad is None and model[0].bias.grad is not None


def test_detach_gives_copies_without_history():
    replicas = replicate(small_model(), ["cpu"] * 2, detach=True)
    assert all(r[0].weight.grad_fn is None and not r[0].weight.requires_grad for r in replicas)


def test_broadcast_double_backward():
    """The broadcast's backward is made of differentiable ops: grad of grad works."""
    w = torch.randn(3, requires_grad=True)
    copies = Broadcast.apply([torch.device("cpu")] * 2, w)
    loss = (copies[0] ** 3).sum() + (copies[1] ** 3).sum()
    (g,) = torch.autograd.grad(loss, w, create_graph=True)
    (gg,) = torch.autograd.grad(g.sum(), w)
    assert torch.allclose(g, 6 * w**2) and torch.allclose(gg, 12 * w)


def test_broadcast_of_nothing():
    assert broadcast([], [torch.device("cpu")] * 3) == [[], [], []]
    assert replicate(nn.Linear(2, 2), []) == []


def test_error_replicate_parameter_not_on_first_device():
    model = nn.Linear(2, 2).to("meta")
    with pytest.raises(
        RuntimeError, match=r"parameter 'weight' is on meta but devices\[0\] is cpu — move"
    ):
        replicate(model, ["cpu", "cpu"])
