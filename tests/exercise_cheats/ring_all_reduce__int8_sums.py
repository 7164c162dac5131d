"""Cheat 6, wrong code the data could not see: a ring that adds through int8 buffers — right
on small integers, wrong on real data (fractions, large values)."""

import torch

from minidp.comm import p2p


def ring_all_reduce(tensor, group):
    rank, world = group.rank(), group.size()
    chunks = tensor.view(-1).tensor_split(world)
    for step in range(world - 1):
        send_c, recv_c = (rank + step + 1) % world, (rank + step + 2) % world
        outgoing = chunks[send_c].to(torch.int8)
        incoming = torch.empty_like(chunks[recv_c], dtype=torch.int8)
        sending = p2p.isend(outgoing, (rank - 1) % world, group) if outgoing.numel() else None
        if incoming.numel():
            p2p.recv(incoming, (rank + 1) % world, group)
        if sending is not None:
            sending.wait()
        chunks[recv_c].copy_(chunks[recv_c].to(torch.int8) + incoming)
    for step in range(world - 1):
        send_c, recv_c = (rank + step) % world, (rank + step + 1) % world
        outgoing = chunks[send_c].to(torch.int8)
        incoming = torch.empty_like(chunks[recv_c], dtype=torch.int8)
        sending = p2p.isend(outgoing, (rank - 1) % world, group) if outgoing.numel() else None
        if incoming.numel():
            p2p.recv(incoming, (rank + 1) % world, group)
        if sending is not None:
            sending.wait()
        chunks[recv_c].copy_(incoming)
    return tensor
