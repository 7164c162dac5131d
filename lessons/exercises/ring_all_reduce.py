"""Exercise (lesson 8): the textbook ring all-reduce.

Task: sum ``tensor`` over all ranks, **in place**, with a ring. Every rank may talk only to
its neighbours: send to ``(rank - 1) % world`` (left), receive from ``(rank + 1) % world``
(right) — the direction of every ring in minidp, gloo's.

1. Cut the flat tensor into ``world`` chunks: ``chunks = tensor.view(-1).tensor_split(world)``
   (views: writing into a chunk writes into ``tensor``). Some may be empty (numel < world).
2. Reduce-scatter, ``world - 1`` steps: at step s send chunk ``(rank + s + 1) % world``,
   receive chunk ``(rank + s + 2) % world`` into a fresh buffer and add it into your chunk.
   Afterwards rank r holds chunk r fully summed.
3. All-gather, ``world - 1`` steps: at step s send chunk ``(rank + s) % world`` and receive
   chunk ``(rank + s + 1) % world`` straight into place (copy, do not add).

Tools: ``from minidp.comm import p2p`` — ``p2p.send(t, peer, group)`` /
``p2p.recv(t, peer, group)`` block; ``p2p.isend(...)`` / ``p2p.irecv(...)`` return a message
with ``.wait()``. ``group.rank()``, ``group.size()``. Tensors sent must be contiguous.

Hints:
* If every rank first does a *blocking* send, nobody reaches its recv: a deadlock. Start
  the send with ``isend``, do the ``recv``, then ``wait()`` the send.
* Forgetting the all-gather leaves each rank with one finished chunk only.
* Read the answer when stuck: ``minidp/textbook/collectives.py`` (lesson 8 prints it).
  Calling it, or any of minidp's collectives, is refused in a check: the ring is the
  exercise.

Check: ``python -m minidp exercise check ring_all_reduce``
"""

import torch

from minidp.comm import p2p  # noqa: F401  (you will need it)


def ring_all_reduce(tensor: torch.Tensor, group) -> torch.Tensor:
    """Sum ``tensor`` over every rank of ``group``, in place; return ``tensor``."""
    raise NotImplementedError("not implemented yet: write the ring (see the steps above)")
