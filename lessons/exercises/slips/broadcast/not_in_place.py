"""not in place

`tensor` itself is unchanged on the receiving ranks: the broadcast value went into another
buffer. Receive into `tensor` (or tensor.copy_(...)), in place like torch.distributed.broadcast.
"""

import torch

from minidp.comm import p2p


def broadcast(tensor: torch.Tensor, src: int, group) -> torch.Tensor:
    rank, world = group.rank(), group.size()
    if rank == src:
        for peer in range(world):
            if peer != src:
                p2p.send(tensor, peer, group)
        return tensor
    received = torch.empty_like(tensor)
    p2p.recv(received, src, group)
    return received
