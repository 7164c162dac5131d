"""Record one FSDP step for real: units gathered, computed, freed, prefetched.

    python -m minidp classroom --no-serve --only fsdp --out /tmp/cls

Rank *processes* (``minidp.launch.ProcessWorld``: prefetch is about time). The MLP is the
HSDP scene's: each hidden ``Linear`` is its own ``fully_shard`` unit and the root keeps the
last layer, so both scenes name the same layers the same way. Step 1 runs untraced (the
root learns the forward order it will prefetch in); step 2 is recorded. The library emits
``issue all-gather``, ``all-gather``, ``forward``/``backward`` per unit and
``reduce-scatter``. What memory each unit's parameters take, and when, is observed here by
wrapping that unit's own ``gather``/``free`` (they still run unchanged, ``observe``):

* ``unit gather start`` — the all-gather allocates its ``(world, T)`` buffer (``buffer``
  bytes: every rank's padded shard) on the communication thread, which for a prefetched
  unit is long before the unit computes;
* ``unit gathered`` — the full parameters (``bytes``) were allocated and filled from it;
  the buffer is released right after (both existed at once for that moment);
* ``unit freed`` — the full parameters are dropped;
* ``unit grads`` — backward has left the unit's full (unsharded) gradients (``bytes``),
  taken for the reduce-scatter; ``unit reduce start`` — the reduce-scatter's ``(world,
  T)`` input is built (``buffer``); ``unit reduced`` — both are released (the rank keeps
  only its reduced shard, in the sharded ``.grad``).

Every size says which it is: ``bytes``/``buffer`` of a gathered unit or its gradients are
the *full* unit's (what the rank allocates for it); ``fsdp shards`` is what this rank keeps
of its sharded parameters, the ``to_local()`` bytes (a sharded parameter is a DTensor:
its own ``numel()``/``nbytes`` are the global tensor's).

Test: ``pytest tests/test_classroom.py``
"""

from __future__ import annotations

import torch
from torch import nn

from minidp import trace

LANE = "classroom"


def mlp(width: int, depth: int = 3) -> nn.Module:
    """The MLP of the DDP, memory, FSDP and HSDP scenes (same seed: same weights everywhere)."""
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, 4))


def local_bytes(params) -> int:
    """Bytes this rank holds of ``params``: a DTensor's local shard, a plain tensor whole."""
    return sum((p.to_local() if hasattr(p, "to_local") else p).nbytes for p in params)


def observe(unit, rank: int, prefix: str = "unit", **tags) -> None:
    """Wrap ``unit.gather``/``free``/``take_grads``/``reduce`` (this instance only) to note
    the bytes each call allocates or releases."""
    from minidp.fsdp.shard import shard_rows  # the engine's padding rule: rows per rank

    size = unit.param_dtype.itemsize
    full = sum(s.numel() * size for s in unit.shapes)  # the whole unit (global shapes)
    buffer = unit.world * sum(p.numel() for p in unit.padded) * size  # (world, T): every rank's
    gather, free, take, reduce = unit.gather, unit.free, unit.take_grads, unit.reduce

    def gathered() -> None:
        trace.instant(f"{prefix} gather start", lane=LANE, rank=rank, unit=unit.label,
                      buffer=buffer, **tags)  # fmt: skip
        gather()
        trace.instant(f"{prefix} gathered", lane=LANE, rank=rank, unit=unit.label, bytes=full,
                      buffer=buffer, **tags)  # fmt: skip

    def freed() -> None:
        free()
        trace.instant(f"{prefix} freed", lane=LANE, rank=rank, unit=unit.label, bytes=full,
                      **tags)  # fmt: skip

    def taken() -> list:
        grads = take()  # full-size gradients, plain tensors: their numel is the unit's
        trace.instant(f"{prefix} grads", lane=LANE, rank=rank, unit=unit.label,
                      bytes=sum(g.nbytes for g in grads), **tags)  # fmt: skip
        return grads

    def reduced(grads):
        rows = sum(shard_rows(g.shape[0], unit.world) * g[0].numel() for g in grads)
        trace.instant(f"{prefix} reduce start", lane=LANE, rank=rank, unit=unit.label,
                      buffer=unit.world * rows * grads[0].element_size(), **tags)  # fmt: skip
        out = reduce(grads)
        trace.instant(f"{prefix} reduced", lane=LANE, rank=rank, unit=unit.label, **tags)
        return out

    unit.gather, unit.free, unit.take_grads, unit.reduce = gathered, freed, taken, reduced


def shard_model(model: nn.Module, fully_shard, **options) -> None:
    """Each hidden ``Linear`` its own unit; the root (``fully_shard(model)``) keeps the last."""
    for layer in model[:-1]:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, **options)
    fully_shard(model, **options)


def _fsdp_rank(rank: int, world: int, width: int) -> list[dict]:
    from minidp.fsdp import fully_shard
    from minidp.fsdp.wrap import unit_of

    model = mlp(width)
    shard_model(model, fully_shard)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    units = [u for m in model.modules() if (u := unit_of(m)) is not None and u.shapes]
    g = torch.Generator().manual_seed(rank)
    for step in range(2):
        x, y = torch.randn(16, width, generator=g), torch.randn(16, 4, generator=g)
        if step == 1:
            for u in units:
                observe(u, rank)
            with trace.recording() as rec:
                opt.zero_grad()
                nn.functional.mse_loss(model(x), y).backward()
                opt.step()
        else:
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    shards = local_bytes(model.parameters())  # this rank's rows, not the DTensors' global size
    mine = [e for e in rec.events if e["name"] not in ("send", "recv")]
    start = min(e["ts"] for e in mine)
    mine.append({"name": "fsdp shards", "ph": "i", "s": "t", "ts": start, "pid": rank,
                 "tid": LANE, "args": {"bytes": shards, "world": world}})  # fmt: skip
    return mine


def fsdp_events(world, width: int = 64) -> list[dict]:
    """One traced FSDP step (after a first, untraced one) on ``world`` (a ProcessWorld)."""
    return [e for r in world.run(_fsdp_rank, width, timeout=120.0) for e in r]
