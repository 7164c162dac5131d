"""Small models and the *per-chunk definition* of DataParallel, shared by the DP tests.

Run: ``pytest tests/test_dp_models.py``

The definition, written without any of minidp's machinery: split every batched argument
with ``chunk(n, dim)``, call the model on each chunk in turn, concatenate the outputs; the
parameter gradients are each chunk's gradient, summed in chunk (= device) order. DP on
``n`` devices must reproduce this bit for bit. The tests here check the reference itself.
"""

from __future__ import annotations

import copy
from collections import namedtuple

import torch
from torch import nn

Pair = namedtuple("Pair", ["logits", "feat"])


class MLP(nn.Sequential):
    def __init__(self) -> None:
        super().__init__(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 4 * 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (B, 2, 4, 4)
        return self.fc(torch.relu(self.conv(x)).flatten(1))  # (B, 3)


class BNNet(nn.Sequential):
    def __init__(self) -> None:
        super().__init__(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))


class DictNet(nn.Module):
    """Returns a dict with a nested namedtuple and a None."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(6, 8)
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> dict:
        feat = torch.tanh(self.body(x))  # (B, 8)
        return {"out": Pair(self.head(feat), feat), "aux": None}


class KwargsNet(nn.Module):
    """Takes a scattered kwarg (mask), a non-tensor positional arg and a string kwarg."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 3)

    def forward(self, x, scale: float, *, mask=None, mode: str = "sum"):
        y = self.fc(x) * scale  # (B, 3)
        if mask is not None:
            y = y * mask  # mask: (B, 1), chunked like x
        return (y, y.sum(1)) if mode == "pair" else y


MODELS = {"mlp": MLP, "conv": ConvNet, "bn": BNNet, "dict": DictNet, "kwargs": KwargsNet}


def make_case(name: str, batch: int, seed: int = 0):
    """A fresh model and its call arguments: ``(model, args, kwargs)``."""
    torch.manual_seed(seed)
    model = MODELS[name]()
    g = torch.Generator().manual_seed(seed + 1)
    if name == "conv":
        return model, (torch.randn(batch, 2, 4, 4, generator=g),), {}
    x = torch.randn(batch, 6, generator=g)
    if name == "kwargs":
        mask = (torch.rand(batch, 1, generator=g) > 0.3).float()
        return model, (x, 0.5), {"mask": mask, "mode": "pair"}
    return model, (x,), {}


def tensors_of(obj) -> list[torch.Tensor]:
    """Tensors of a nested output, depth first (dict order, tuple order)."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict):
        obj = list(obj.values())
    if isinstance(obj, list | tuple):
        return [t for o in obj for t in tensors_of(o)]
    return []


def map_tensors(fn, obj):
    """``obj`` with every tensor replaced by ``fn(tensor)`` (same containers)."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, dict):
        return {k: map_tensors(fn, v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        members = [map_tensors(fn, o) for o in obj]
        return type(obj)(*members) if hasattr(obj, "_fields") else type(obj)(members)
    return obj


def loss_of(out) -> torch.Tensor:
    """A loss that touches every output element with a different weight."""
    return sum(((t.float() - 0.1) ** 2).sum() for t in tensors_of(out))


def chunk_args(args, kwargs, n: int, dim: int = 0):
    """Per-chunk arguments the plain way: tensors chunked, everything else repeated."""

    def split(v):
        return list(v.chunk(n, dim)) if isinstance(v, torch.Tensor) else None

    pieces = [split(a) for a in args] + [split(v) for v in kwargs.values()]
    count = min(len(p) for p in pieces if p is not None)
    per_chunk = []
    for c in range(count):
        a = tuple(a if p is None else p[c] for a, p in zip(args, pieces))
        kw = {k: v if p is None else p[c] for (k, v), p in zip(kwargs.items(), pieces[len(args) :])}
        per_chunk.append((a, kw))
    return per_chunk


def cat_outputs(outs: list, dim: int = 0):
    """Concatenate per-chunk outputs of the same structure (dict / tuple / None / tensor)."""
    first = outs[0]
    if isinstance(first, torch.Tensor):
        return torch.cat(outs, dim)
    if first is None:
        return None
    if isinstance(first, dict):
        return {k: cat_outputs([o[k] for o in outs], dim) for k in first}
    members = [cat_outputs(list(col), dim) for col in zip(*outs)]
    return type(first)(*members) if hasattr(first, "_fields") else type(first)(members)


def per_chunk_reference(model: nn.Module, args, kwargs, n: int, dim: int = 0):
    """The definition of DP: ``(output, grads)``, grads summed in chunk order.

    Runs on a deep copy, so the caller's model (and its BatchNorm stats) is untouched.
    """
    model = copy.deepcopy(model)
    params = [p for p in model.parameters() if p.requires_grad]
    outs = [model(*a, **kw) for a, kw in chunk_args(args, kwargs, n, dim)]
    out = cat_outputs(outs, dim)
    # d loss / d each chunk output *as a leaf* (an output may also feed another output, and
    # that path is counted inside the chunk's own backward below).
    leaves = [map_tensors(lambda t: t.detach().requires_grad_(), o) for o in outs]
    flat_leaves = [t for o in leaves for t in tensors_of(o)]
    upstream = torch.autograd.grad(loss_of(cat_outputs(leaves, dim)), flat_leaves)
    out_tensors = [tensors_of(o) for o in outs]
    grads, k = None, 0
    for ts in out_tensors:  # chunk by chunk, in device order
        g = upstream[k : k + len(ts)]
        k += len(ts)
        mine = torch.autograd.grad(ts, params, g, allow_unused=True)
        mine = [torch.zeros_like(p) if m is None else m for p, m in zip(params, mine)]
        grads = mine if grads is None else [a + b for a, b in zip(grads, mine)]
    return out, grads


def test_reference_with_one_chunk_is_the_plain_model():
    for name in MODELS:
        model, args, kwargs = make_case(name, batch=6)
        out, grads = per_chunk_reference(model, args, kwargs, n=1)
        plain = model(*args, **kwargs)
        assert all(torch.equal(a, b) for a, b in zip(tensors_of(out), tensors_of(plain)))
        loss_of(plain).backward()
        params = [p for p in model.parameters() if p.requires_grad]
        assert all(torch.equal(p.grad, g) for p, g in zip(params, grads))


def test_reference_chunks_like_tensor_chunk():
    model, args, kwargs = make_case("kwargs", batch=10)
    pieces = chunk_args(args, kwargs, 4)
    assert [a[0].shape[0] for a, _ in pieces] == [3, 3, 3, 1]
    assert all(a[1] == 0.5 and kw["mode"] == "pair" for a, kw in pieces)
    assert [kw["mask"].shape[0] for _, kw in pieces] == [3, 3, 3, 1]
