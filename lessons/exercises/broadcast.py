"""Exercise (lesson 9): broadcast.

Task: afterwards every rank's ``tensor`` holds rank ``src``'s tensor — **in place**, like
``torch.distributed.broadcast``. The simplest way: ``src`` sends to every other rank, the
others receive. (Faster: a tree, where every rank that has the data passes it on; see
``minidp/textbook/collectives.py``.)

Tools: ``from minidp.comm import p2p`` (``send``/``recv`` block, ``isend``/``irecv`` return a
message with ``.wait()``); ``group.rank()``, ``group.size()``.

Hints:
* The root is ``src``, which need not be rank 0.
* Receive into ``tensor`` itself: the caller keeps using that object.

Check: ``python -m minidp exercise check broadcast``
"""

import torch

from minidp.comm import p2p  # noqa: F401  (you will need it)


def broadcast(tensor: torch.Tensor, src: int, group) -> None:
    """Copy rank ``src``'s ``tensor`` into ``tensor`` on every rank."""
    raise NotImplementedError("not implemented yet: src sends, everyone else receives")
