"""returned a new tensor

The answer must be written into `tensor` itself (in place), like
torch.distributed.all_reduce: chunks made with tensor.view(-1).tensor_split(world) are views,
so adding into them (add_, +=) changes `tensor`; a sum built in a clone is lost.
"""

import torch

from minidp.comm import p2p


def ring_all_reduce(tensor: torch.Tensor, group) -> torch.Tensor:
    rank, world = group.rank(), group.size()
    chunks = tensor.clone().view(-1).tensor_split(world)  # the slip: views of a copy
    for step in range(world - 1):
        send_c, recv_c = (rank + step + 1) % world, (rank + step + 2) % world
        buf = torch.empty_like(chunks[recv_c])
        sending = p2p.isend(chunks[send_c], (rank - 1) % world, group)
        p2p.recv(buf, (rank + 1) % world, group)
        sending.wait()
        chunks[recv_c].add_(buf)
    for step in range(world - 1):
        send_c, recv_c = (rank + step) % world, (rank + step + 1) % world
        sending = p2p.isend(chunks[send_c], (rank - 1) % world, group)
        p2p.recv(chunks[recv_c], (rank + 1) % world, group)
        sending.wait()
    return torch.cat(chunks).view_as(tensor)
