"""minidp's ``fully_shard`` on a process group with collectives but no send/recv.

torch's threaded test world (``FSDPTestMultiThread``: every rank a thread, its groups
Python ``ProcessGroup`` subclasses that implement the collectives and not send/recv) is
where torch's own thread-based FSDP2 tests run. minidp runs there on the group's own
collectives (``minidp/fsdp/collectives.py``), on the calling thread: here FSDP2 and minidp
train side by side in that world, bit for bit. A group with neither send/recv nor the
collectives FSDP needs is refused at ``fully_shard`` time, naming what is missing.
main: every collective failed inside the first forward ("No backend type associated with
device type cpu", from send).

Run: ``pytest tests/test_fsdp_threaded.py``
"""

from __future__ import annotations

import copy
import threading

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
from helpers import FSDP2_UNUSABLE
from test_fsdp_support import TinyLM, batches, diff, loss_fn

import minidp

try:  # torch's threaded world (tests only: a private module of torch's test utilities)
    from torch.testing._internal.distributed import multi_threaded_pg
except ImportError:  # pragma: no cover - a torch without it
    multi_threaded_pg = None

needs_threaded = pytest.mark.skipif(
    multi_threaded_pg is None or FSDP2_UNUSABLE is not None,
    reason="torch's threaded test world (or FSDP2 on gloo) is not in this torch",
)


def run_threaded(fn, world: int, timeout: float = 120.0) -> list:
    """``fn(rank)`` on every rank of a fresh threaded world: the results, in rank order."""
    isolation = getattr(torch._C._distributed_c10d, "_set_thread_isolation_mode", None)
    if isolation is not None:
        isolation(True)
    installed = multi_threaded_pg._install_threaded_pg()
    store, results, errors = dist.HashStore(), [None] * world, []

    def rank_main(rank):
        dist.init_process_group("threaded", rank=rank, world_size=world, store=store)
        try:
            results[rank] = fn(rank)
        except BaseException as exc:  # noqa: BLE001 - re-raised below, with its rank
            errors.append((rank, exc))
            multi_threaded_pg.ProcessLocalGroup.exception_handle(exc)
        finally:
            if installed == dist.distributed_c10d._world:
                dist.destroy_process_group()

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(world)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout)
    finally:
        multi_threaded_pg._uninstall_threaded_pg()
        multi_threaded_pg.ProcessLocalGroup.reset()
        if isolation is not None:
            isolation(False)
    if errors:
        raise errors[0][1]
    return results


def _side_by_side(rank: int) -> list[tuple]:
    """TinyLM under FSDP2 and minidp in the threaded world: 2 steps, rows of max |diff|."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    g = torch.Generator().manual_seed(0)  # threads share the global RNG: a private one
    theirs = TinyLM()
    with torch.no_grad():
        for p in theirs.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    ours = copy.deepcopy(theirs)
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for model, fs in ((theirs, lambda m: fully_shard(m, mesh=mesh)), (ours, minidp.fully_shard)):
        for block in model.blocks:
            fs(block)
        fs(model)
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (theirs, ours)]
    rows = []
    for step, (tokens, target) in enumerate(batches(rank, 2)):
        losses = []
        for model, opt in zip((theirs, ours), opts):
            loss = loss_fn(model, tokens, target)
            loss.backward()
            losses.append(loss.detach())
            opt.step()
            opt.zero_grad()
        rows.append((step, "loss", diff(losses[1], losses[0])))
        mine = dict(ours.named_parameters())
        for n, p in theirs.named_parameters():
            rows.append((step, n, diff(mine[n].full_tensor(), p.full_tensor())))
    return rows


@needs_threaded
def test_trains_on_torchs_threaded_world_bit_identical_to_fsdp2():
    for rank, rows in enumerate(run_threaded(_side_by_side, 2)):
        assert rows and all(r[-1] == 0.0 for r in rows), (rank, [r for r in rows if r[-1]])


class _NoCollectives(dist.ProcessGroup):
    """A Python group with neither send/recv nor collectives of its own."""


def test_a_group_without_send_recv_or_collectives_is_refused_at_fully_shard():
    group = _NoCollectives(0, 2)
    with pytest.raises(RuntimeError, match=r"has no send/recv and no allgather, "
                       r"reduce_scatter, allreduce\. Hint: use a gloo or nccl group"):  # fmt: skip
        minidp.fully_shard(nn.Linear(4, 4), process_group=group)
