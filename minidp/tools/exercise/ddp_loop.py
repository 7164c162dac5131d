"""Exercises on the DDP training loop (lessons 12 and 15): the sampler, and checkpoints.

* ``distributed_sampler``: the indices one rank reads in one epoch. Reference: torch's
  ``torch.utils.data.DistributedSampler`` with ``set_epoch(epoch)``, the same list.
* ``checkpoint``: save on rank 0, load on every rank. Reference: ``torch.save`` and
  ``torch.load(map_location="cpu", weights_only=True)`` of the same state (through
  memory), ``torch.equal`` on every tensor loaded. The harness makes the classic race
  deterministic: an older checkpoint already sits at the path (a resumed job overwrites
  its last one), and rank 0 reaches the save ``SLOW_SAVE_S`` late, as a rank that also
  writes logs would — a rank that loads without waiting reads the old file, every time.
  The race runs in the sandbox on thread ranks; the reference state is rebuilt in the
  judge from the case (the training is deterministic).

Test: ``pytest tests/test_exercises_dp_ddp.py -k "sampler or checkpoint"``
"""

from __future__ import annotations

import io
import os
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

from minidp.comm import barrier
from minidp.tools.exercise.inputs import world_and_seed
from minidp.tools.exercise.spec import Answer, Exercise, Expected, Mistake, Result, everywhere, same

SLOW_SAVE_S = 0.5


def _st():
    from hypothesis import strategies

    return strategies


# ----------------------------------------------------------------------------- sampler


def _torch_indices(case, rank: int, epoch: int) -> list[int]:
    sampler = torch.utils.data.DistributedSampler(
        range(case["n"]), case["world"], rank, case["shuffle"], case["seed"], case["drop_last"]
    )
    sampler.set_epoch(epoch)
    return list(sampler)


def _learn_sampler(fn, case, rank, world, group) -> Answer:
    got = fn(
        case["n"], world, rank, case["epoch"], case["seed"], case["shuffle"], case["drop_last"]
    )
    return Answer(list(got) if isinstance(got, (list, tuple)) else got)


def _expect_sampler(case, rank, world, group) -> Expected:
    n, epoch = case["n"], case["epoch"]
    order = _torch_indices({**case, "world": 1}, 0, epoch)  # the shared order, unpadded
    share = -(-n // world)  # ceil(n / W)
    extra = {
        "epoch 0": _torch_indices(case, rank, 0),
        "unpadded": order[rank::world],
        "block": (order + order * world)[rank * share : (rank + 1) * share],
    }
    return Expected(_torch_indices(case, rank, epoch), extra)


SAMPLER_CASES = (  # 10 on 3 ranks pads to 12 (indices 0 and 1 twice); drop_last cuts to 9
    {"world": 1, "n": 6, "epoch": 1, "seed": 0, "shuffle": True, "drop_last": False},
    {"world": 2, "n": 8, "epoch": 0, "seed": 0, "shuffle": False, "drop_last": False},
    {"world": 3, "n": 10, "epoch": 0, "seed": 0, "shuffle": False, "drop_last": False},
    {"world": 3, "n": 10, "epoch": 2, "seed": 7, "shuffle": True, "drop_last": False},
    {"world": 2, "n": 9, "epoch": 3, "seed": 1, "shuffle": True, "drop_last": True},
    {"world": 5, "n": 3, "epoch": 1, "seed": 2, "shuffle": True, "drop_last": False},
    {"world": 3, "n": 2, "epoch": 0, "seed": 0, "shuffle": False, "drop_last": True},
)


def sampler_cases():
    """Hypothesis strategy: world 1..5, n 0..30, epoch 0..5, any seed and options."""
    from hypothesis import strategies as st

    return st.fixed_dictionaries(
        {
            "world": st.integers(1, 5),
            "n": st.integers(0, 30),
            "epoch": st.integers(0, 5),
            "seed": st.integers(0, 99),
            "shuffle": st.booleans(),
            "drop_last": st.booleans(),
        }
    )


def shrink_sampler(case):
    """Smaller cases: fewer ranks, a shorter dataset, epoch 1, seed 0."""
    for w in range(1, case["world"]):
        yield {**case, "world": w}
    for n in sorted({0, 1, case["n"] // 2, case["n"] - 1}):
        if 0 <= n < case["n"]:
            yield {**case, "n": n}
    if case["epoch"] > 1:
        yield {**case, "epoch": 1}
    if case["seed"]:
        yield {**case, "seed": 0}


def _matches(variant: str):
    """``everywhere`` test: this rank's answer is the ``variant`` computed beside torch's."""
    return lambda rank, r: same(r.got, r.extra[variant])


DISTRIBUTED_SAMPLER = Exercise(
    name="distributed_sampler",
    lesson="12_distributed_sampler",
    summary="this rank's indices for one epoch: shared shuffle (seed + epoch), pad, stride",
    reference="torch.utils.data.DistributedSampler after set_epoch(epoch), the same list",
    learn=_learn_sampler,
    expect=_expect_sampler,
    answers=(
        "torch.utils.data.distributed.DistributedSampler",
        "minidp.ddp.sampler.DistributedSampler",
        "minidp.textbook.sampler.DistributedSampler",
    ),
    cases=SAMPLER_CASES,
    strategy=sampler_cases,
    shrink=shrink_sampler,
    mistakes=(
        Mistake(
            "sampler without set_epoch",
            "every epoch gets epoch 0's order: seed the shuffle with seed + epoch "
            "(torch.Generator().manual_seed(seed + epoch)) — what sampler.set_epoch(epoch) "
            "does; without it every epoch replays the same order.",
            lambda case, results: case["epoch"] > 0 and everywhere(results, _matches("epoch 0")),
        ),
        Mistake(
            "contiguous blocks instead of a stride",
            "rank r must take every world-th index starting at r (order[r::world]), not a "
            "block of consecutive ones: that is how torch interleaves the shares.",
            lambda case, results: everywhere(results, _matches("block")),
        ),
        Mistake(
            "no padding",
            "every rank must get the same number of indices (DDP runs one all-reduce per step "
            "on every rank): pad the order by repeating its head up to a multiple of world, or "
            "cut it when drop_last.",
            lambda case, results: everywhere(results, _matches("unpadded")),
        ),
    ),
)

# ----------------------------------------------------------------------------- checkpoint


def warm_optimizers(rank: int, world_size: int) -> None:
    """``Exercise.prepare``: the first ``torch.optim`` optimizer in a process imports
    ``torch._dynamo`` (seconds on a busy machine) — pay that before the case clock runs."""
    torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)


def _trained(case, seed: int, steps: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    """A small model and its SGD-with-momentum optimizer after ``steps`` steps."""
    g = torch.Generator().manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(5, 4, generator=g)).square().mean().backward()
        opt.step()
    return model, opt


def _state(model: nn.Module, opt: torch.optim.Optimizer) -> list:
    """What a resume needs, as a flat list: weights, then momentum buffers (None if absent)."""
    momenta = [opt.state.get(p, {}).get("momentum_buffer") for p in model.parameters()]
    return [t.detach().clone() for t in model.state_dict().values()] + momenta


def _learn_checkpoint(fn, case, rank, world, group) -> Answer:
    seed = case.get("seed", 0)
    path = Path(tempfile.gettempdir()) / f"minidp-exercise-{os.getpid()}-w{world}-s{seed}.pt"
    old_model, old_opt = _trained(case, seed, steps=1)  # yesterday's checkpoint
    model, opt = _trained(case, seed, steps=case["steps"])  # identical on every rank
    fresh_model, fresh_opt = _trained(case, seed + 1000, steps=0)  # a restarted job
    if rank == 0:
        torch.save({"model": old_model.state_dict(), "optimizer": old_opt.state_dict()}, path)
    barrier(group)
    if rank == 0:
        time.sleep(SLOW_SAVE_S)  # rank 0 is late: a loader that does not wait reads the old file
    fn(model, opt, fresh_model, fresh_opt, str(path), group)
    barrier(group)  # everyone has read the file before it goes
    if rank == 0:
        path.unlink(missing_ok=True)
    return Answer(_state(fresh_model, fresh_opt))


def _expect_checkpoint(case, rank, world, group) -> Expected:
    seed = case.get("seed", 0)
    model, opt = _trained(case, seed, steps=case["steps"])
    buffer = io.BytesIO()  # the reference: torch.save / torch.load of the same state
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, map_location="cpu", weights_only=True)
    ref_model, ref_opt = _trained(case, seed + 1000, steps=0)
    ref_model.load_state_dict(loaded["model"])
    ref_opt.load_state_dict(loaded["optimizer"])
    old = _state(*_trained(case, seed, steps=1))
    extra = {"old": old, "fresh": _state(*_trained(case, seed + 1000, 0))}
    return Expected(_state(ref_model, ref_opt), extra)


def _weights_only(r: Result) -> bool:
    """The weights are right, and no momentum buffer came back."""
    half = len(r.expected) // 2  # weights first, then one momentum buffer per parameter
    return all(m is None for m in r.got[half:]) and same(r.got[:half], r.expected[:half])


CHECKPOINT = Exercise(
    name="checkpoint",
    lesson="15_checkpoints",
    summary="save model + optimizer on rank 0, barrier, load on every rank (map_location)",
    reference="torch.save / torch.load(map_location='cpu', weights_only=True) of the same state",
    learn=_learn_checkpoint,
    expect=_expect_checkpoint,
    cases=(
        {"world": 1, "steps": 2, "seed": 0},
        {"world": 2, "steps": 2, "seed": 1},
        {"world": 3, "steps": 3, "seed": 2},
    ),
    strategy=lambda: world_and_seed(1, 3, steps=_st().integers(1, 3)),
    generated=1,  # each case waits SLOW_SAVE_S on purpose
    shrink=lambda case: ({**case, "world": w} for w in range(2, case["world"])),
    prepare=warm_optimizers,
    mistakes=(
        Mistake(
            "checkpoint loaded before the save finished",
            "a rank read the OLD checkpoint: it loaded while rank 0 was still saving. Put a "
            "barrier between the save and the load (minidp.comm.barrier(group)), on every "
            "rank — rank 0 included, after its save.",
            lambda case, results: any(same(r.got, r.extra["old"]) for r in results[1:]),
        ),
        Mistake(
            "optimizer state not restored",
            "the weights came back but the optimizer's momentum did not: save and load "
            "optimizer.state_dict() too, or the resumed run takes different steps.",
            lambda case, results: all(_weights_only(r) for r in results),
        ),
        Mistake(
            "only rank 0 loaded",
            "ranks other than 0 still hold their fresh weights: every rank must load the file.",
            lambda case, results: any(same(r.got, r.extra["fresh"]) for r in results[1:]),
        ),
    ),
)
