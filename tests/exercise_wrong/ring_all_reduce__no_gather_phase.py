"""Wrong on purpose: only the reduce-scatter phase; the finished chunks never travel."""

import torch

from minidp.comm import p2p


def ring_all_reduce(tensor, group):
    me, n = group.rank(), group.size()
    parts = list(tensor.view(-1).tensor_split(n))
    for s in range(n - 1):
        out_idx = (me + s + 1) % n
        in_idx = (me + s + 2) % n
        received = torch.zeros_like(parts[in_idx])
        req = p2p.isend(parts[out_idx], (me - 1) % n, group)
        p2p.recv(received, (me + 1) % n, group)
        req.wait()
        parts[in_idx] += received
    return tensor
