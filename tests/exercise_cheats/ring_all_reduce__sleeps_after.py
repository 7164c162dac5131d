"""Cheat 7, a hang after PASS: a right ring that also starts ``sleep`` in a child process of
its own session, which would hold the checker's pipes for minutes."""

import subprocess
import sys

import torch

from minidp.comm import p2p

MARKER = "300.0417"  # how the test finds the sleep afterwards


def _exchange(send_buf, recv_buf, group):
    rank, world = group.rank(), group.size()
    sending = p2p.isend(send_buf, (rank - 1) % world, group) if send_buf.numel() else None
    if recv_buf.numel():
        p2p.recv(recv_buf, (rank + 1) % world, group)
    if sending is not None:
        sending.wait()


def ring_all_reduce(tensor, group):
    subprocess.Popen(["sleep", MARKER], stdout=sys.stdout, stderr=sys.stderr,
                     start_new_session=True)  # fmt: skip
    rank, world = group.rank(), group.size()
    chunks = tensor.view(-1).tensor_split(world)
    for step in range(world - 1):
        send_c, recv_c = (rank + step + 1) % world, (rank + step + 2) % world
        incoming = torch.empty_like(chunks[recv_c])
        _exchange(chunks[send_c], incoming, group)
        chunks[recv_c].add_(incoming)
    for step in range(world - 1):
        _exchange(chunks[(rank + step) % world], chunks[(rank + step + 1) % world], group)
    return tensor
