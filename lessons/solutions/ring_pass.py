"""Reference solution: the ring pass.

Check: ``python -m minidp exercise check ring_pass --path lessons/solutions/ring_pass.py``
"""

import torch

from minidp.comm import p2p


def ring_pass(tensor: torch.Tensor, group) -> torch.Tensor:
    rank, world = group.rank(), group.size()
    if world == 1:
        return tensor.clone()  # my right neighbour is me
    received = torch.empty_like(tensor)
    sending = p2p.isend(tensor.contiguous(), (rank - 1) % world, group)  # start, don't block
    p2p.recv(received, (rank + 1) % world, group)
    sending.wait()
    return received
