"""rank 0's own value left out

The result misses exactly rank 0's input: start rank 0's sum from its own tensor, not from
zeros or from the first message.
"""

import torch

from minidp.comm import p2p


def naive_all_reduce(tensor: torch.Tensor, group) -> torch.Tensor:
    rank, world = group.rank(), group.size()
    if rank == 0:
        total = torch.zeros_like(tensor)
        buffer = torch.empty_like(tensor)
        for peer in range(1, world):
            p2p.recv(buffer, peer, group)
            total += buffer
        tensor.copy_(total)
        for peer in range(1, world):
            p2p.send(tensor, peer, group)
    else:
        p2p.send(tensor, 0, group)
        p2p.recv(tensor, 0, group)
    return tensor
