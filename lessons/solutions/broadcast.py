"""Reference solution: broadcast as a binomial tree, written out (lesson 9 prints minidp's
own, ``minidp/textbook/collectives.py``; the check makes that one unavailable).

Check: ``python -m minidp exercise check broadcast --path lessons/solutions/broadcast.py``
"""

import torch

from minidp.comm import p2p


def broadcast(tensor: torch.Tensor, src: int, group) -> None:
    rank, world = group.rank(), group.size()
    flat = tensor.contiguous().view(-1)  # (numel,); a copy only if tensor is not contiguous
    me = (rank - src) % world  # my distance from the root
    reach = 1  # distances 0 .. reach-1 hold the data; each round doubles them
    while reach < world:
        if me < reach and me + reach < world:  # I have it: pass it reach ranks on
            p2p.send(flat, (rank + reach) % world, group)
        elif reach <= me < 2 * reach:  # my turn: receive from reach ranks back
            p2p.recv(flat, (rank - reach) % world, group)
        reach *= 2
    if flat.data_ptr() != tensor.data_ptr():
        tensor.copy_(flat.view(tensor.shape))
