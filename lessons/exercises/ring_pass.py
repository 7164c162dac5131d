"""Exercise (lesson 6): the ring pass — shift by one.

Task: every rank sends its ``tensor`` to its left neighbour, ``(rank - 1) % world``, and
returns the tensor it received from its right neighbour, ``(rank + 1) % world``. This one
step is the move every ring collective repeats (minidp's rings, like gloo's, all run to
the left).

Tools: ``from minidp.comm import p2p`` — ``p2p.send(t, peer, group)`` /
``p2p.recv(t, peer, group)`` block; ``p2p.isend(...)`` / ``p2p.irecv(...)`` start a message
and return it, ``.wait()`` finishes it. ``group.rank()``, ``group.size()``.

Hints:
* A send completes only once the receiver has posted its receive. If every rank first
  does a blocking ``send``, nobody reaches ``recv``: a deadlock (lesson 6 shows one).
  Start the send with ``isend``, ``recv``, then ``wait()`` the send.
* Receive into a new buffer: ``torch.empty_like(tensor)``.
* With one rank, your right neighbour is yourself (and gloo cannot send to itself).

Check: ``python -m minidp exercise check ring_pass``
"""

import torch

from minidp.comm import p2p  # noqa: F401  (you will need it)


def ring_pass(tensor: torch.Tensor, group) -> torch.Tensor:
    """Send ``tensor`` to rank-1; return what rank+1 sent (a new tensor, same shape/dtype)."""
    raise NotImplementedError("not implemented yet: send left, receive from the right")
