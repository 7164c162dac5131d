"""returned a new tensor

The sum you return is right, but `tensor` itself still holds this rank's input: the
answer must be written into `tensor` (in place), like torch.distributed.all_reduce —
tensor += buffer on rank 0, and receive the sum into `tensor` on the others.
"""

import torch

from minidp.comm import p2p


def naive_all_reduce(tensor: torch.Tensor, group) -> torch.Tensor:
    rank, world = group.rank(), group.size()
    total = tensor.clone()  # the slip: the sum lives in a copy
    if rank == 0:
        buffer = torch.empty_like(tensor)
        for peer in range(1, world):
            p2p.recv(buffer, peer, group)
            total += buffer
        for peer in range(1, world):
            p2p.send(total, peer, group)
    else:
        p2p.send(tensor, 0, group)
        p2p.recv(total, 0, group)
    return total
