"""The parameter-server ("naive") all-reduce: everybody talks to rank 0.

Test: ``pytest tests/test_collectives.py -k naive``

The first thing anyone would write (and what ``DataParallel``'s main device does), kept to
measure beside the ring: rank 0 receives and sends ``(n-1)·S`` bytes, so its link is the
bottleneck and the time grows with ``n``. Rank 0 reduces in rank order:
``((x0 OP x1) OP x2) ...``.
"""

from __future__ import annotations

import torch

from minidp.comm import agree, ops, p2p
from minidp.comm import group as groups
from minidp.comm.ring import unexpanded


@torch.no_grad()  # like c10d: a collective is not part of the autograd graph
def naive_all_reduce(tensor: torch.Tensor, op="sum", group=None) -> torch.Tensor:
    """All-reduce ``tensor`` in place through rank 0 (the parameter server); returns it."""
    g = groups.resolve(group)
    if groups.skip_if_not_member(g, "naive_all_reduce"):
        return tensor
    memory = unexpanded(tensor)  # x.expand(...): each memory location once, like gloo
    if memory is not None:
        naive_all_reduce(memory, op, group)
        return tensor
    with p2p.operation("naive_all_reduce"):
        name, _ = agree.agree_reduce(g, "naive_all_reduce", tensor, op, "naive_all_reduce")
        rank, world = g.rank(), g.size()
        if tensor.numel() == 0 or world == 1:
            return tensor

        def body(flat: torch.Tensor) -> None:
            if rank == 0:
                # (world-1, numel): one row per worker
                inbox = torch.empty((world - 1, flat.numel()), dtype=flat.dtype, device=flat.device)
                msgs = [p2p.irecv(inbox[r - 1], r, g) for r in range(1, world)]
                for r in range(1, world):  # reduce in rank order as each arrives
                    msgs[r - 1].wait()
                    ops.combine(name, flat, inbox[r - 1])  # acc = acc OP x_r
                ops.finish(name, flat, world)
                p2p.wait_all([p2p.isend(flat, r, g) for r in range(1, world)])
            else:
                p2p.isend(flat, 0, g).wait()
                p2p.irecv(flat, 0, g).wait()

        return ops.flat_inplace(tensor, body)
