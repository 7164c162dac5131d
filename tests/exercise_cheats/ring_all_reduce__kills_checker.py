"""Cheat 7, the rough way: kill the process the sandbox was forked from (which would end
what the learner started), then give a right ring's answer."""

import os
import signal

import torch

from minidp.comm import p2p


def ring_all_reduce(tensor, group):
    os.kill(os.getppid(), signal.SIGKILL)
    rank, world = group.rank(), group.size()
    chunks = tensor.view(-1).tensor_split(world)
    for step in range(world - 1):
        send_c, recv_c = (rank + step + 1) % world, (rank + step + 2) % world
        incoming = torch.empty_like(chunks[recv_c])
        sending = (
            p2p.isend(chunks[send_c], (rank - 1) % world, group) if chunks[send_c].numel() else None
        )
        if incoming.numel():
            p2p.recv(incoming, (rank + 1) % world, group)
        if sending is not None:
            sending.wait()
        chunks[recv_c].add_(incoming)
    for step in range(world - 1):
        send_c, recv_c = (rank + step) % world, (rank + step + 1) % world
        sending = (
            p2p.isend(chunks[send_c], (rank - 1) % world, group) if chunks[send_c].numel() else None
        )
        if chunks[recv_c].numel():
            p2p.recv(chunks[recv_c], (rank + 1) % world, group)
        if sending is not None:
            sending.wait()
    return tensor
