"""ignored src

Every rank got rank 0's tensor, but src was another rank: send from `src`, not from rank 0.
"""

import torch

from minidp.comm import p2p


def broadcast(tensor: torch.Tensor, src: int, group) -> None:
    rank, world = group.rank(), group.size()
    if rank == 0:
        for peer in range(1, world):
            p2p.send(tensor, peer, group)
    else:
        p2p.recv(tensor, 0, group)
