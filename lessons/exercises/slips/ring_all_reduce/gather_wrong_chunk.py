"""chunks in the wrong place

Every rank has all the right sums, but some chunks sit at the wrong offset: in the
all-gather, at step s send chunk (rank + s) % world and receive chunk (rank + s + 1) % world
into *that* chunk's slice.
"""

import torch

from minidp.comm import p2p


def ring_all_reduce(tensor: torch.Tensor, group) -> torch.Tensor:
    rank, world = group.rank(), group.size()
    flat = tensor.view(-1)
    chunks = flat.tensor_split(world)
    for step in range(world - 1):
        send_c, recv_c = (rank + step + 1) % world, (rank + step + 2) % world
        buf = torch.empty_like(chunks[recv_c])
        sending = p2p.isend(chunks[send_c], (rank - 1) % world, group)
        p2p.recv(buf, (rank + 1) % world, group)
        sending.wait()
        chunks[recv_c].add_(buf)
    done = {rank: chunks[rank].clone()}
    for step in range(world - 1):
        send_c, recv_c = (rank + step) % world, (rank + step + 1) % world
        buf = torch.empty_like(chunks[recv_c])
        sending = p2p.isend(done[send_c], (rank - 1) % world, group)
        p2p.recv(buf, (rank + 1) % world, group)
        sending.wait()
        done[recv_c] = buf
    order = [done[c] for c in range(world)]
    flat.copy_(torch.cat(order[1:] + order[:1]))  # the slip: every chunk one slot off
    return tensor
