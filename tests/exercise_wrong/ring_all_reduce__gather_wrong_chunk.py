"""Wrong on purpose: the all-gather stores each finished chunk at the wrong offset
(receives chunk rank+s+1 into the slot of chunk rank-s-1)."""

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
    flat.copy_(torch.cat(order[1:] + order[:1]))  # every chunk one slot off
    return tensor
