"""Wrong on purpose: rank 0 sums, but never sends the sum back."""

import torch

from minidp.comm import p2p


def naive_all_reduce(tensor: torch.Tensor, group) -> torch.Tensor:
    rank, world = group.rank(), group.size()
    if rank == 0:
        buffer = torch.empty_like(tensor)
        for peer in range(1, world):
            p2p.recv(buffer, peer, group)
            tensor += buffer
    else:
        p2p.send(tensor, 0, group)
    return tensor
