"""the reduce-scatter ran world steps

The reduce-scatter takes world-1 steps, not world: one step more adds a rank's piece twice.
"""

import torch

from minidp.comm import p2p


def ring_all_reduce(tensor: torch.Tensor, group) -> torch.Tensor:
    rank, world = group.rank(), group.size()
    chunks = tensor.view(-1).tensor_split(world)
    for step in range(world if world > 1 else 0):  # the slip: world steps, not world - 1
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
    return tensor
