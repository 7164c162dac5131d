"""the all-gather adds instead of copying

In the all-gather the chunk that arrives is already the full sum: copy it into place
(chunk.copy_(buffer), or receive straight into the chunk), do not add it to what you hold.
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
    for step in range(world - 1):
        send_c, recv_c = (rank + step) % world, (rank + step + 1) % world
        buf = torch.empty_like(chunks[recv_c])
        sending = p2p.isend(chunks[send_c], (rank - 1) % world, group)
        p2p.recv(buf, (rank + 1) % world, group)
        sending.wait()
        chunks[recv_c].add_(buf)  # the slip: += where a copy belongs
    return tensor
