"""kept the wrong chunk

Each rank holds a fully summed chunk, but not its own: rank r must end with input_list[r]
summed. In the ring, send piece (rank - step - 1) % world at step s, so that the last piece
you receive and add is piece `rank`.
"""

import torch

from minidp.comm import p2p


def reduce_scatter(output: torch.Tensor, input_list: list[torch.Tensor], group) -> None:
    rank, world = group.rank(), group.size()
    pieces = [t.clone() for t in input_list]
    buffer = torch.empty_like(output)
    for step in range(world - 1):
        send_c, recv_c = (rank + step) % world, (rank + step + 1) % world
        sending = p2p.isend(pieces[send_c], (rank - 1) % world, group)
        p2p.recv(buffer, (rank + 1) % world, group)
        sending.wait()
        pieces[recv_c] += buffer
    output.copy_(pieces[(rank - 1) % world])
