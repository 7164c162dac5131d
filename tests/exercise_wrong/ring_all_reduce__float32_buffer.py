"""Wrong on purpose: receive buffers made with torch.empty(n) — float32, whatever the
tensor's dtype. For a float64 tensor the message is twice the buffer."""

import torch

from minidp.comm import p2p


def ring_all_reduce(tensor: torch.Tensor, group) -> torch.Tensor:
    rank, world = group.rank(), group.size()
    chunks = tensor.view(-1).tensor_split(world)
    for step in range(world - 1):
        send_c, recv_c = (rank + step + 1) % world, (rank + step + 2) % world
        buf = torch.empty(chunks[recv_c].numel())  # the slip: float32
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
