"""Wrong on purpose: a ring all-gather that stores what arrives at step s at index s+1
(by arrival, not by the rank it came from)."""

import torch

from minidp.comm import p2p


def all_gather(tensor_list: list[torch.Tensor], tensor: torch.Tensor, group) -> None:
    rank, world = group.rank(), group.size()
    arrived = [tensor.clone()]
    for _ in range(world - 1):
        buffer = torch.empty_like(tensor)
        sending = p2p.isend(arrived[-1], (rank - 1) % world, group)
        p2p.recv(buffer, (rank + 1) % world, group)
        sending.wait()
        arrived.append(buffer)
    for i, t in enumerate(arrived):
        tensor_list[i].copy_(t)
