"""averaged instead of summed

Every rank holds the sum divided by the world size: all_reduce's default op is SUM — do not
divide (DDP divides the gradients itself, afterwards).
"""

import torch

from minidp.comm import p2p


def naive_all_reduce(tensor: torch.Tensor, group) -> torch.Tensor:
    rank, world = group.rank(), group.size()
    if rank == 0:
        buffer = torch.empty_like(tensor)
        for peer in range(1, world):
            p2p.recv(buffer, peer, group)
            tensor += buffer
        tensor.copy_(tensor / world)
        for peer in range(1, world):
            p2p.send(tensor, peer, group)
    else:
        p2p.send(tensor, 0, group)
        p2p.recv(tensor, 0, group)
    return tensor
