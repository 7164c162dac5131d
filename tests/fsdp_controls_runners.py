"""Rank-side runners for ``test_fsdp_controls.py`` (no tests here): FSDP2's controls
(``set_reshard_after_backward``, explicit prefetch, ``unshard``/``reshard``) on minidp's
``fully_shard`` and on FSDP2's, the same seeded ``TinyLM``, side by side.

Each run reports the per-step comparison rows (``fsdp_scenarios._compare``: full
parameters, shards, shard gradients) and how many all-gathers each library ran per step:
minidp's from its trace, FSDP2's by counting its calls to torch's all-gather (a counter
around the function, which still runs).

Functions sent to rank processes must be module-level, so they live here.
"""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
from fsdp_scenarios import _compare
from test_fsdp_support import TinyLM, batches, loss_fn, make_optimizer

import minidp
from minidp import trace

BLOCKS = 4  # enough units to prefetch two ahead


@contextlib.contextmanager
def fsdp2_gathers():
    """Count FSDP2's all-gathers (its collectives module calls this function by name)."""
    name = "all_gather_single" if hasattr(dist, "all_gather_single") else "all_gather_into_tensor"
    original, count = getattr(dist, name), [0]

    def counted(*args, **kwargs):
        count[0] += 1
        return original(*args, **kwargs)

    setattr(dist, name, counted)
    try:
        yield count
    finally:
        setattr(dist, name, original)


def _models(world: int, reshard=True):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    reference = TinyLM(blocks=BLOCKS)
    theirs, ours = TinyLM(blocks=BLOCKS), TinyLM(blocks=BLOCKS)
    theirs.load_state_dict(reference.state_dict())
    ours.load_state_dict(reference.state_dict())
    mesh = init_device_mesh("cpu", (world,))
    for model, shard in ((theirs, lambda m, **kw: fully_shard(m, mesh=mesh, **kw)),
                         (ours, minidp.fully_shard)):  # fmt: skip
        for block in model.blocks:
            shard(block, reshard_after_forward=reshard)
        shard(model)
    return theirs, ours


def _setup(model, move: str) -> None:
    blocks = list(model.blocks)
    if move == "prefetch":  # two units ahead in forward, two behind in backward
        for i, block in enumerate(blocks):
            block.set_modules_to_forward_prefetch(blocks[i + 1 : i + 3])
            block.set_modules_to_backward_prefetch(blocks[max(0, i - 2) : i][::-1])


def _step(model, opt, move: str, tokens, target) -> None:
    opt.zero_grad()
    if move == "reshard_after_backward":  # 2 micro-batches: the first keeps everything
        for i in range(2):
            last = i == 1
            model.set_requires_gradient_sync(last)
            model.set_reshard_after_backward(last)
            part = slice(i * len(tokens) // 2, (i + 1) * len(tokens) // 2)
            loss_fn(model, tokens[part], target[part]).backward()
    elif move == "unshard":  # gather the whole model ahead of the forward
        handle = model.unshard(async_op=True)
        handle.wait()
        loss_fn(model, tokens, target).backward()
    else:
        loss_fn(model, tokens, target).backward()
    opt.step()


def controls_vs_fsdp2(rank: int, world: int, moves: list[str], steps: int = 3) -> dict:
    """For each move: rows, and all-gathers per step of minidp and of FSDP2."""
    out = {}
    for move in moves:
        theirs, ours = _models(world)
        for model in (theirs, ours):
            _setup(model, move)
        opts = [make_optimizer("adamw", m.parameters()) for m in (theirs, ours)]
        rows, gathers, issued = [], [], []
        for step, (tokens, target) in enumerate(batches(rank, steps)):
            with fsdp2_gathers() as n:
                _step(theirs, opts[0], move, tokens, target)
            with trace.recording() as rec:
                _step(ours, opts[1], move, tokens, target)
            ran = sum(e["name"].startswith("all-gather") for e in rec.events)
            gathers.append((ran, n[0]))
            kinds = ("issue", "forward", "backward")
            issued.append([e["name"] for e in rec.events if e["name"].startswith(kinds)])
            rows += _compare(step, theirs, ours)
        out[move] = {"rows": rows, "gathers": gathers, "issued": issued}
    return out


def reshard_to_vs_fsdp2(rank: int, world: int, k: int, steps: int = 2) -> dict:
    """``reshard_after_forward=k`` on every block, minidp beside FSDP2: rows, all-gathers per
    step, and the bytes minidp sent per step with k and with True."""
    out = {"rows": [], "gathers": [], "bytes": {}}
    for reshard in (k, True):
        theirs, ours = _models(world, reshard)
        opts = [make_optimizer("adamw", m.parameters()) for m in (theirs, ours)]
        before = 0
        for step, (tokens, target) in enumerate(batches(rank, steps)):
            with fsdp2_gathers() as n:
                _step(theirs, opts[0], "plain", tokens, target)
            with trace.recording() as rec:
                _step(ours, opts[1], "plain", tokens, target)
            if reshard == k:
                ran = sum(e["name"].startswith("all-gather") for e in rec.events)
                out["gathers"].append((ran, n[0]))
                out["rows"] += _compare(step, theirs, ours)
            sent = minidp.fsdp.traffic(ours).sent_bytes
            out["bytes"][str(reshard)] = sent - before
            before = sent
    return out


def paramless_root_gathers(rank: int, world: int, steps: int = 2) -> list[tuple[int, int]]:
    """A root with no parameters of its own (every Linear a unit): all-gathers per step of
    minidp (trace) and FSDP2 (counted), and whether the losses were equal."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    def mlp() -> torch.nn.Module:
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))

    mesh = init_device_mesh("cpu", (world,))
    theirs, ours = mlp(), mlp()
    for model, shard in ((theirs, lambda m: fully_shard(m, mesh=mesh)),
                         (ours, minidp.fully_shard)):  # fmt: skip
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                shard(layer)
        shard(model)
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(rank))
    out = []
    for _ in range(steps):
        with fsdp2_gathers() as n:
            a = theirs(x).square().mean()
            a.backward()
        with trace.recording() as rec:
            b = ours(x).square().mean()
            b.backward()
        ran = sum(e["name"].startswith("all-gather") for e in rec.events)
        out.append((ran, n[0], torch.equal(a.detach(), b.detach())))
    return out
