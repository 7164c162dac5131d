"""Reference solution: the textbook ring all-reduce, written out (lesson 8 prints minidp's
own, ``minidp/textbook/collectives.py``; the check makes that one unavailable).

Check: ``python -m minidp exercise check ring_all_reduce --path lessons/solutions/ring_all_reduce.py``
"""

import torch

from minidp.comm import p2p


def _exchange(send_buf: torch.Tensor, recv_buf: torch.Tensor, group) -> None:
    """Send to the left while receiving from the right; empty chunks are skipped."""
    rank, world = group.rank(), group.size()
    sending = p2p.isend(send_buf, (rank - 1) % world, group) if send_buf.numel() else None
    if recv_buf.numel():
        p2p.recv(recv_buf, (rank + 1) % world, group)
    if sending is not None:
        sending.wait()


def ring_all_reduce(tensor: torch.Tensor, group) -> torch.Tensor:
    rank, world = group.rank(), group.size()
    flat = tensor.view(-1)  # (numel,): a view, so writing a chunk writes the tensor
    chunks = flat.tensor_split(world)  # world views, the first numel % world one longer
    for step in range(world - 1):  # reduce-scatter: rank r ends owning chunk r, summed
        send_c, recv_c = (rank + step + 1) % world, (rank + step + 2) % world
        incoming = torch.empty_like(chunks[recv_c])
        _exchange(chunks[send_c], incoming, group)
        chunks[recv_c].add_(incoming)
    for step in range(world - 1):  # all-gather: pass the finished chunks on, copying
        send_c, recv_c = (rank + step) % world, (rank + step + 1) % world
        _exchange(chunks[send_c], chunks[recv_c], group)
    return tensor
