"""Reference solution: reduce-scatter as a ring, written out (lesson 8 prints minidp's own,
``minidp/textbook/collectives.py``; the check makes that one unavailable).

Check: ``python -m minidp exercise check reduce_scatter --path lessons/solutions/reduce_scatter.py``
"""

import torch

from minidp.comm import p2p


def reduce_scatter(output: torch.Tensor, input_list: list[torch.Tensor], group) -> None:
    rank, world = group.rank(), group.size()
    pieces = [t.clone() for t in input_list]  # mine to add into
    incoming = torch.empty_like(output)
    for step in range(world - 1):  # piece c starts on rank c-1 and travels left
        send_c, recv_c = (rank + step + 1) % world, (rank + step + 2) % world
        sending = p2p.isend(pieces[send_c], (rank - 1) % world, group) if output.numel() else None
        if output.numel():
            p2p.recv(incoming, (rank + 1) % world, group)
            pieces[recv_c].add_(incoming)
        if sending is not None:
            sending.wait()
    output.copy_(pieces[rank])  # the last piece I added to is mine, finished
