"""Wrong on purpose: right sums, but every step sends the whole tensor round the ring —
(W-1) times the ring's traffic. The checker counts the bytes each rank sends."""

import torch

from minidp.comm import p2p


def ring_all_reduce(tensor: torch.Tensor, group) -> torch.Tensor:
    rank, world = group.rank(), group.size()
    passing = tensor.clone()  # what travels: each rank's own input, one hop per step
    total = tensor.clone()
    for _ in range(world - 1):
        buf = torch.empty_like(passing)
        sending = p2p.isend(passing, (rank - 1) % world, group)
        p2p.recv(buf, (rank + 1) % world, group)
        sending.wait()
        total += buf
        passing = buf
    for _ in range(world - 1):  # and once more round, "to be sure every rank agrees"
        buf = torch.empty_like(total)
        sending = p2p.isend(total, (rank - 1) % world, group)
        p2p.recv(buf, (rank + 1) % world, group)
        sending.wait()
    tensor.copy_(total)
    return tensor
