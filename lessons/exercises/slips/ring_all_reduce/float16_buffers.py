"""precision lost on the way

The sums are close but rounded: the chunks travel (and are added) in float16, which keeps
11 significant bits. Keep every buffer in the tensor's own dtype: torch.empty_like(chunk).
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
        incoming = torch.empty(chunks[recv_c].shape, dtype=torch.float16)  # the slip
        _exchange(chunks[send_c].to(torch.float16), incoming, group)
        chunks[recv_c].copy_(chunks[recv_c].to(torch.float16) + incoming)
    for step in range(world - 1):
        send_c, recv_c = (rank + step) % world, (rank + step + 1) % world
        incoming = torch.empty(chunks[recv_c].shape, dtype=torch.float16)
        _exchange(chunks[send_c].to(torch.float16), incoming, group)
        chunks[recv_c].copy_(incoming)
    return tensor
