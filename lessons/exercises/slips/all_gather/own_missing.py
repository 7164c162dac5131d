"""own entry missing

Your own entry, tensor_list[rank], was never filled: nobody sends you your own tensor — copy
it in yourself (tensor_list[rank].copy_(tensor)).
"""

import torch

from minidp.comm import p2p


def all_gather(tensor_list: list[torch.Tensor], tensor: torch.Tensor, group) -> None:
    rank, world = group.rank(), group.size()
    current = tensor.clone()
    for step in range(world - 1):
        buffer = torch.empty_like(tensor)
        sending = p2p.isend(current, (rank - 1) % world, group)
        p2p.recv(buffer, (rank + 1) % world, group)
        sending.wait()
        tensor_list[(rank + step + 1) % world].copy_(buffer)
        current = buffer
