"""returned your own tensor

Every rank returned its own input: receive into a *new* buffer (torch.empty_like(tensor))
and return that buffer.
"""

import torch

from minidp.comm import p2p


def ring_pass(tensor: torch.Tensor, group) -> torch.Tensor:
    rank, world = group.rank(), group.size()
    if world > 1:
        received = torch.empty_like(tensor)
        sending = p2p.isend(tensor, (rank - 1) % world, group)
        p2p.recv(received, (rank + 1) % world, group)
        sending.wait()
    return tensor
