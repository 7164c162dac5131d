"""entries in the wrong order

Every rank's tensor arrived but sits at the wrong index: store what arrives at step s at the
index of the rank it *came from* ((rank - s - 1) % world in a ring), not at index s.
"""

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
