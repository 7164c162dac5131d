"""Exercise (lesson 7): the parameter server's all-reduce.

Task: sum ``tensor`` over all ranks, **in place**, through rank 0: every other rank sends
its tensor to rank 0; rank 0 adds them all to its own; then rank 0 sends the sum back to
every rank, which receives it into ``tensor``.

Tools: ``from minidp.comm import p2p`` — ``p2p.send(t, peer, group)`` /
``p2p.recv(t, peer, group)`` block; ``p2p.isend`` / ``p2p.irecv`` return a message with
``.wait()``. ``group.rank()``, ``group.size()``.

Hints:
* Rank 0 receives each message into a fresh buffer (``torch.empty_like(tensor)``) and
  adds it: ``tensor += buffer``. Start from rank 0's own tensor, not from zeros.
* Do not forget the way back: the other ranks must end with the sum too.
* all_reduce sums; it does not average.

Check: ``python -m minidp exercise check naive_all_reduce``
"""

import torch

from minidp.comm import p2p  # noqa: F401  (you will need it)


def naive_all_reduce(tensor: torch.Tensor, group) -> torch.Tensor:
    """Sum ``tensor`` over every rank of ``group`` via rank 0, in place; return ``tensor``."""
    raise NotImplementedError("not implemented yet: gather on rank 0, sum, send back")
