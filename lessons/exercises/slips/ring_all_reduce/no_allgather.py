"""forgot the all-gather

Each rank holds only its own finished chunk (and partial sums elsewhere): after the world-1
reduce-scatter steps, run world-1 more steps that pass the finished chunks round the ring,
copying (not adding) what arrives.
"""

import torch

from minidp.comm import p2p


def ring_all_reduce(tensor: torch.Tensor, group) -> torch.Tensor:
    rank, world = group.rank(), group.size()
    chunks = tensor.view(-1).tensor_split(world)
    for step in range(world - 1):
        send_c, recv_c = (rank + step + 1) % world, (rank + step + 2) % world
        buf = torch.empty_like(chunks[recv_c])
        sending = p2p.isend(chunks[send_c], (rank - 1) % world, group)
        p2p.recv(buf, (rank + 1) % world, group)
        sending.wait()
        chunks[recv_c].add_(buf)
    return tensor  # the slip: no all-gather loop
