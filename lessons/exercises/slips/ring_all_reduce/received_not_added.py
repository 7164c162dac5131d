"""the received chunk is never added

Each reduce-scatter step must add what arrives into your chunk (chunk.add_(buffer)): here
the buffer is received and dropped, so every chunk keeps one rank's own values, passed on.
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
        sending.wait()  # the slip: chunks[recv_c].add_(buf) is missing
    for step in range(world - 1):
        send_c, recv_c = (rank + step) % world, (rank + step + 1) % world
        sending = p2p.isend(chunks[send_c], (rank - 1) % world, group)
        p2p.recv(chunks[recv_c], (rank + 1) % world, group)
        sending.wait()
    return tensor
