"""fractions lost on the way

The sums hold whole numbers where the right ones have fractions (1.5, 0.75): what travels
has an integer dtype — a buffer made with dtype=torch.int8, or a .to(int) on the way. Keep
every buffer in the tensor's own dtype: torch.empty_like(chunk).
"""

import torch

from minidp.comm import p2p


def _exchange(outgoing, incoming, group):
    rank, world = group.rank(), group.size()
    sending = p2p.isend(outgoing, (rank - 1) % world, group) if outgoing.numel() else None
    if incoming.numel():
        p2p.recv(incoming, (rank + 1) % world, group)
    if sending is not None:
        sending.wait()


def ring_all_reduce(tensor: torch.Tensor, group) -> torch.Tensor:
    rank, world = group.rank(), group.size()
    chunks = tensor.view(-1).tensor_split(world)
    for step in range(world - 1):
        send_c, recv_c = (rank + step + 1) % world, (rank + step + 2) % world
        incoming = torch.empty_like(chunks[recv_c], dtype=torch.int8)  # the slip: int8
        _exchange(chunks[send_c].to(torch.int8), incoming, group)
        chunks[recv_c].copy_(chunks[recv_c].to(torch.int8) + incoming)
    for step in range(world - 1):
        send_c, recv_c = (rank + step) % world, (rank + step + 1) % world
        incoming = torch.empty_like(chunks[recv_c], dtype=torch.int8)
        _exchange(chunks[send_c].to(torch.int8), incoming, group)
        chunks[recv_c].copy_(incoming)
    return tensor
