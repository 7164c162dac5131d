"""Rank-side runners for ``tests/test_fsdp_moves.py`` (no tests here), part 2: FSDP2's casts
(mixed precision per module, external inputs, a clamped reduce dtype), frozen parameters
within and across units, CPU offload, a user's all-reduce hook, a custom forward method,
tensor parallelism beside FSDP, ``fully_shard.state`` and FSDP2's refusals — each on FSDP2
and minidp side by side (``fsdp_moves_runners``: rows of max |diff|, 0.0 = bit for bit).
"""

from __future__ import annotations

import torch
import torch.nn as nn
from fsdp_moves_runners import _backward, _twins, both, compare, data, scenario, train
from test_fsdp_support import Block, diff

import minidp

F16, BF16 = torch.float16, torch.bfloat16


def policies(fs):
    """(MixedPrecisionPolicy, CPUOffloadPolicy) of the side ``fs`` (a fully_shard) is on."""
    if getattr(fs, "func", fs) is minidp.fully_shard:
        return minidp.MixedPrecisionPolicy, getattr(minidp, "CPUOffloadPolicy", None)
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy

    return MixedPrecisionPolicy, CPUOffloadPolicy


class Saves(nn.Module):
    """A Linear that notes the dtype of its input (``user_cast``: casts it itself)."""

    def __init__(self, seen: list, user_cast: bool = False):
        super().__init__()
        self.l, self.seen, self.user_cast = nn.Linear(8, 8), seen, user_cast

    def forward(self, x, y=None):
        self.seen.append(str(x.dtype) if y is None else f"{x.dtype} {y.dtype}")
        x = x.to(self.l.weight.dtype) if self.user_cast else x
        return self.l(x) if y is None else self.l(x) + y.to(x.dtype)


class Pair(nn.Module):
    def __init__(self, user_cast=False, external=False):
        super().__init__()
        self.seen: list = []
        self.c1, self.c2 = Saves(self.seen, user_cast), Saves(self.seen, user_cast)
        self.external = external

    def forward(self, x):
        self.seen.append(str(x.dtype))
        y = torch.ones(2, 8) if self.external else None  # an input from outside the root
        return self.c2(self.c1(x), y)


CASTS = {  # name: (Pair kwargs, {child: policy kwargs}, root policy kwargs)
    "fp16 on c2": ({}, {"c2": {"param_dtype": F16}}, {}),
    "fp16 on c2, the module casts": (
        {"user_cast": True},
        {"c2": {"param_dtype": F16, "cast_forward_inputs": False}},
        {},
    ),
    "fp16 on c1, fp32 out": ({}, {"c1": {"param_dtype": F16, "output_dtype": torch.float32}}, {}),
    "external input, c2 casts": (
        {"external": True},
        {"c2": {"param_dtype": F16}},
        {"param_dtype": F16},
    ),
    "external input, c2 does not": (
        {"external": True},
        {"c2": {"param_dtype": F16, "cast_forward_inputs": False}},
        {"param_dtype": F16},
    ),
}


@scenario
def casts(rank, world):
    """torch's test_float16_on_one_submodule and _submodules_with_external_inputs: the
    dtype each module is called with, and the gradients, on both."""
    rows, seen = [], {}
    for name, (kw, children, root) in CASTS.items():

        def shard(m, fs, children=children, root=root):
            policy = policies(fs)[0]
            for child, p in children.items():
                fs(getattr(m, child), mp_policy=policy(**p))
            fs(m, mp_policy=policy(**root))

        theirs, ours = both(lambda kw=kw: Pair(**kw), shard, world)
        for m in (theirs, ours):
            _backward(m(data(rank, 0, 2, 8)).float())
        seen[name] = (theirs.seen, ours.seen)
        rows += [(name, *r) for r in compare(0, theirs, ours)]
    return {"rows": rows, "seen": seen}


@scenario
def clamp_reduce_dtype(rank, world):
    """torch's test_clamp_reduce_dtype: a bf16 model, policy (bf16, bf16), then
    ``model.to(float32)`` after wrapping: the reduction stays bf16 on both."""

    def shard(m, fs):
        policy = policies(fs)[0](param_dtype=BF16, reduce_dtype=BF16)
        for layer in m:
            fs(layer, mp_policy=policy)
        fs(m, mp_policy=policy)
        m.to(torch.float32)

    def build():
        return nn.Sequential(nn.Linear(16, 16, dtype=BF16), nn.Linear(16, 16, dtype=BF16))

    theirs, ours = both(build, shard, world)
    return train(theirs, ours, lambda m, i: _backward(m(data(rank, i, 4, 16))), 2)


@scenario
def grouped_cast_inputs(rank, world):
    """torch's test_grouped_module_cast_forward_inputs: one bf16 unit for two Linears with
    an fp32 value between them; each casts its own input."""

    class AB(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(16, 16, bias=False), nn.Linear(16, 16, bias=False)

        def forward(self, x):
            return self.b(self.a(x).float())

    def shard(m, fs):
        policy = policies(fs)[0](param_dtype=BF16)
        fs([m.a, m.b], mp_policy=policy)
        fs(m, mp_policy=policy)

    theirs, ours = both(AB, shard, world)
    return train(theirs, ours, lambda m, i: _backward(m(data(rank, i, 2, 16)).float()), 2)


@scenario
def frozen_within_units(rank, world):
    """torch's test_train_mixed_requires_grad_per_group: only the biases train (BitFit),
    frozen before or after wrapping, kept gathered or not, activation checkpointing."""
    from torch.distributed._composable import checkpoint

    rows = []
    for after, reshard, ckpt in ((False, True, False), (True, False, True)):

        def freeze(m):
            for n, p in m.named_parameters():
                p.requires_grad_("bias" in n)

        def shard(m, fs, after=after, reshard=reshard, ckpt=ckpt):
            if not after:
                freeze(m)
            for b in m:
                if ckpt:
                    checkpoint(b)
                fs(b, reshard_after_forward=reshard)
            fs(m, reshard_after_forward=reshard)
            if after:
                freeze(m)

        theirs, ours = both(lambda: nn.Sequential(*(Block(8) for _ in range(3))), shard, world)
        tag = f"after={after} reshard={reshard} checkpoint={ckpt}"
        step = lambda m, i: _backward(m(data(rank, i, 4, 8)))  # noqa: E731
        rows += [(tag, *r) for r in train(theirs, ours, step, 3)]
    return rows


@scenario
def frozen_across_units(rank, world):
    """torch's test_train_mixed_requires_grad_across_groups: every other Linear frozen,
    a step under no_grad, all unfrozen for the last step."""

    def build():
        return nn.Sequential(*(m for _ in range(4) for m in (nn.Linear(8, 8), nn.ReLU())))

    def shard(m, fs):
        for layer in m:
            if isinstance(layer, nn.Linear):
                fs(layer)
        for layer in m[::4]:
            layer.requires_grad_(False)

    theirs, ours = both(build, shard, world)

    def step(m, i):
        if i == 1:
            with torch.no_grad():
                loss = m(data(rank, i, 4, 8)).sum()
            for layer in m:  # FSDP2 keeps a root gathered after an eval (eval_then_step)
                if hasattr(layer, "reshard"):
                    layer.reshard()
            return loss
        if i == 3:
            m.requires_grad_(True)
        return _backward(m(data(rank, i, 4, 8)))

    return train(theirs, ours, step, 4)


@scenario
def eval_then_step(rank, world):
    """An eval forward (no_grad), an optimizer step, a forward: FSDP2 2.13 keeps the root's
    parameters gathered after the eval and computes with them though the step changed the
    shards (stale); minidp frees at an eval's end and gathers the new values. Returns, per
    side, whether the output equals the one computed from the full (resharded) weights."""

    def shard(m, fs):
        fs(m)

    build = lambda: nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))  # noqa: E731
    fresh = []
    for m in both(build, shard, world):
        opt = torch.optim.SGD(m.parameters(), lr=0.5)
        x = data(rank, 0, 4, 8)
        _backward(m(x))
        with torch.no_grad():
            m(x)
        opt.step()
        y = m(x)
        m.reshard()
        w1, b1, w2, b2 = (p.full_tensor() for p in m.parameters())
        fresh.append(torch.allclose(y, torch.relu(x @ w1.T + b1) @ w2.T + b2))
    return fresh


@scenario
def offload_hook_method(rank, world):
    """CPU offload (pin_memory=False), a user's hook on the reduced rows, and a method other
    than forward registered with register_fsdp_forward_method — together."""
    from torch.distributed.fsdp import register_fsdp_forward_method as theirs_register

    class Vit(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(8, 16)

        def features(self, x):
            return self.proj(x).relu()

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.vit, self.head = Vit(), nn.Linear(16, 4)

        def forward(self, x):
            return self.head(self.vit.features(x))

    def shard(m, fs):
        offload = policies(fs)[1](pin_memory=False)
        fs(m.vit, offload_policy=offload)
        fs(m, offload_policy=offload)
        m.set_all_reduce_hook(lambda rows: rows.mul_(0.5))
        mine = getattr(fs, "func", fs) is minidp.fully_shard
        (minidp.register_fsdp_forward_method if mine else theirs_register)(m.vit, "features")

    theirs, ours = both(Model, shard, world)
    return train(theirs, ours, lambda m, i: _backward(m(data(rank, i, 4, 8))), 3)


@scenario
def tensor_parallel_beside(rank, world):
    """Parameters that are DTensors already (a column- then row-parallel MLP on the "tp"
    mesh), FSDP on the "dp" mesh: (dp, tp) = (1, 2) and (2, 1). Placements, full
    tensors, a state dict and training, on both."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard as theirs_fs
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    rows = []
    for shape in ((1, world), (world, 1)):
        mesh = init_device_mesh("cpu", shape, mesh_dim_names=("dp", "tp"))
        torch.manual_seed(0)
        plain = nn.Sequential(nn.Linear(8, 12), nn.ReLU(), nn.Linear(12, 8))
        models = []
        for fs in (theirs_fs, minidp.fully_shard):
            m = parallelize_module(
                _clone(plain), mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()}
            )
            fs(m, mesh=mesh["dp"])
            models.append(m)
        theirs, ours = models
        sd = [{k: v.full_tensor() for k, v in m.state_dict().items()} for m in models]
        rows += [(shape, "state_dict", k, diff(v, sd[1][k])) for k, v in sd[0].items()]
        dp_rank = mesh["dp"].get_local_rank()  # the ranks of one TP group see one batch

        def step(m, i, dp_rank=dp_rank):
            return _backward(m(data(dp_rank, i, 4, 8)))

        rows += [(shape, *r) for r in train(theirs, ours, step, 2)]
    return rows


def _clone(m):
    import copy

    return copy.deepcopy(m)


@scenario
def introspection(rank, world):
    """``fully_shard.state(m)``'s answers before and after the lazy init, on both: roots,
    the states in order, module and parameter names, what a group's pass has left."""
    from test_fsdp_support import TinyLM
    from torch.distributed.fsdp import fully_shard as theirs_fs

    def shard(m, fs):
        fs(m.blocks[0].fc1)
        fs([m.blocks[1], m.norm])
        fs(m)

    answers = []
    for m, fs in zip(both(TinyLM, shard, world), (theirs_fs, minidp.fully_shard)):
        root, inner = fs.state(m), fs.state(m.blocks[1])
        before = (root._is_root, inner._is_root)
        root._lazy_init()
        names = [s._fsdp_param_group._module_fqn for s in root._state_ctx.all_states]
        states = root._state_ctx.all_states
        fqns = [[p._param_fqn for p in s._fsdp_param_group.fsdp_params] for s in states]
        m(data(rank, 0, 2, 3, vocab=13))
        m.blocks[1](torch.zeros(1, 10))  # half of a group's pass: the norm is still to run
        left = [type(x).__name__ for x in inner._modules_to_run_forward]
        answers.append((before, root._is_root, inner._is_root, names, fqns, left))
    return answers


REFUSALS = {  # name: (build, fully_shard kwargs or a mesh shape)
    "3-D mesh": (lambda: nn.Linear(4, 4), {"mesh": (2, 1, 1)}),
    "2-D mesh without names": (lambda: nn.Linear(4, 4), {"mesh": (2, 1), "names": None}),
    "scalar parameter": (lambda: _with(nn.Linear(4, 4), scalar_p=nn.Parameter(torch.ones(()))), {}),
    "non-contiguous": (lambda: nn.Conv2d(8, 8, 3).to(memory_format=torch.channels_last), {}),
    "shard dim 1 of a bias": (lambda: nn.Linear(4, 4), {"dim": 1}),
    "uneven on dim 1": (lambda: nn.Linear(3, 4), {"dim": 1}),
    "a container without forward": (lambda: nn.ModuleList([nn.Linear(4, 4)]), {}),
    "two blocks sharing a submodule": (_twins, {"blocks": True}),
}


def _with(m, **params):
    for k, v in params.items():
        m.register_parameter(k, v)
    return m


@scenario
def refusals(rank, world):
    """FSDP2's refusals at the call, on both: (exception type, message) pairs."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard as theirs_fs
    from torch.distributed.tensor import Shard

    out = {}
    for name, (build, kw) in REFUSALS.items():
        pair = []
        for fs in (theirs_fs, minidp.fully_shard):
            args = {}
            if "mesh" in kw:
                names = kw.get("names", None) if len(kw["mesh"]) != 3 else None
                args["mesh"] = init_device_mesh("cpu", kw["mesh"], mesh_dim_names=names)
            else:
                args["mesh"] = init_device_mesh("cpu", (world,))
            if "dim" in kw:
                args["shard_placement_fn"] = lambda p, d=kw["dim"]: Shard(d)
            try:
                model = build()
                for block in model if kw.get("blocks") else ():
                    fs(block, **args)  # the second block's shared Linear: taken already
                fs(model, **args)
                pair.append(("no error", ""))
            except Exception as exc:  # noqa: BLE001 - compared with FSDP2's
                pair.append((type(exc).__name__, str(exc)))
        out[name] = pair
    return out


@scenario
def traced_groups(rank, world):
    """Lesson 37's move: the mesh's groups wrapped by ``trace.tap`` (every send logged).
    The shards are still DTensors on the torch groups behind the taps, so nothing is
    wrong and nothing is warned; ``clip_grad_norm_`` is the global norm."""
    import warnings

    from minidp import trace
    from minidp.comm.mesh import DeviceMesh
    from minidp.fsdp.dtensor import PlainShardsWarning

    log = trace.MessageLog()
    mesh = minidp.init_device_mesh("cpu", (1, world), mesh_dim_names=("replicate", "shard"))
    tapped = DeviceMesh(mesh.mesh, mesh.mesh_dim_names, [
        trace.tap(mesh.get_group("replicate"), log, copy=False),
        trace.tap(mesh.get_group("shard"), log, copy=False)])  # fmt: skip
    torch.manual_seed(0)
    model = nn.Sequential(Block(8), Block(8))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for b in model:
            minidp.fully_shard(b, mesh=tapped)
        minidp.fully_shard(model, mesh=tapped)
    _backward(model(data(rank, 0, 4, 8)))
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1e9)
    norms = [p.grad.full_tensor().norm() for p in model.parameters()]
    whole = torch.linalg.vector_norm(torch.stack(norms))
    return {
        "plain shards warnings": sum(issubclass(w.category, PlainShardsWarning) for w in caught),
        "dtensors": all(hasattr(p, "full_tensor") for p in model.parameters()),
        "global norm": bool(torch.allclose(norm.full_tensor(), whole)),
        "sends logged": len(log.messages) > 0,
    }
