"""added into input_list

`output` is right, but the caller's input_list changed: the partial sums were added into
its tensors. The inputs are the caller's (torch's reduce_scatter leaves them alone): add
into clones — pieces = [t.clone() for t in input_list].
"""

import torch

from minidp.comm import p2p


def reduce_scatter(output: torch.Tensor, input_list: list[torch.Tensor], group) -> None:
    rank, world = group.rank(), group.size()
    pieces = input_list  # the slip: no clones
    buffer = torch.empty_like(output)
    for step in range(world - 1):
        send_c, recv_c = (rank + step + 1) % world, (rank + step + 2) % world
        sending = p2p.isend(pieces[send_c], (rank - 1) % world, group)
        p2p.recv(buffer, (rank + 1) % world, group)
        sending.wait()
        pieces[recv_c] += buffer
    output.copy_(pieces[rank])
