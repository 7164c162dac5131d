"""Wrong on purpose: a blocking send on every rank before any recv — a deadlock."""

import torch

from minidp.comm import p2p


def ring_pass(tensor: torch.Tensor, group) -> torch.Tensor:
    rank, world = group.rank(), group.size()
    if world == 1:
        return tensor.clone()
    received = torch.empty_like(tensor)
    p2p.send(tensor, (rank - 1) % world, group)
    p2p.recv(received, (rank + 1) % world, group)
    return received
