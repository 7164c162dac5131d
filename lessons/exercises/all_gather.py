"""Exercise (lesson 9): all_gather.

Task: fill ``tensor_list[i]`` with rank i's ``tensor``, on every rank (like
``torch.distributed.all_gather``). Use any pattern you like; the ring is the classic one.

Ring recipe (send left to ``(rank - 1) % world``, receive from the right — the direction of
every ring in minidp, gloo's):
1. Your own entry first: ``tensor_list[rank].copy_(tensor)``.
2. ``world - 1`` steps: at step s send ``tensor_list[(rank + s) % world]`` and receive into
   ``tensor_list[(rank + s + 1) % world]`` — what arrives came from that rank.

Tools: ``from minidp.comm import p2p`` (``send``/``recv`` block, ``isend``/``irecv`` return a
message with ``.wait()``); ``group.rank()``, ``group.size()``. Receive into a contiguous
buffer and ``copy_`` it if an entry of ``tensor_list`` is not contiguous.

Hints:
* Index by the rank a tensor *came from*, not by the step it arrived in.
* Nobody sends you your own tensor.

Check: ``python -m minidp exercise check all_gather``
"""

import torch

from minidp.comm import p2p  # noqa: F401  (you will need it)


def all_gather(tensor_list: list[torch.Tensor], tensor: torch.Tensor, group) -> None:
    """Fill ``tensor_list[i]`` with rank i's ``tensor`` on every rank."""
    raise NotImplementedError("not implemented yet: your own entry, then world-1 ring steps")
