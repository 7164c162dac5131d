"""Cheat 7 again, the plain way: a right ring pass that starts ``sleep`` as an ordinary child
(same session), which outlives the function."""

import subprocess

import torch

from minidp.comm import p2p

MARKER = "300.0555"  # how the test finds the sleep afterwards


def ring_pass(tensor, group):
    subprocess.Popen(["sleep", MARKER])
    rank, world = group.rank(), group.size()
    if world == 1:
        return tensor.clone()
    received = torch.empty_like(tensor)
    sending = p2p.isend(tensor.contiguous(), (rank - 1) % world, group)
    p2p.recv(received, (rank + 1) % world, group)
    sending.wait()
    return received
