"""Exercise (lesson 8): reduce-scatter, the first half of the ring all-reduce.

Task: every rank has ``input_list``, one tensor per rank (all the same shape). Afterwards
rank r's ``output`` holds ``input_list[r]`` summed over all ranks (like
``torch.distributed.reduce_scatter`` with op SUM).

Ring recipe (send left to ``(rank - 1) % world``, receive from the right — the direction of
every ring in minidp, gloo's):
1. Copy the pieces so you may add into them: ``pieces = [t.clone() for t in input_list]``.
2. ``world - 1`` steps: at step s send ``pieces[(rank + s + 1) % world]``, receive a
   partial sum into a buffer and add it into ``pieces[(rank + s + 2) % world]``.
3. The last piece you added to is piece ``rank``: copy it into ``output``.

Tools: ``from minidp.comm import p2p`` (``send``/``recv`` block, ``isend``/``irecv`` return a
message with ``.wait()``); ``group.rank()``, ``group.size()``.

Hints:
* Post the send with ``isend`` before the blocking ``recv``, or every rank waits forever.
* Off-by-one in the chunk index leaves each rank with a finished sum of *another* piece.

Check: ``python -m minidp exercise check reduce_scatter``
"""

import torch

from minidp.comm import p2p  # noqa: F401  (you will need it)


def reduce_scatter(output: torch.Tensor, input_list: list[torch.Tensor], group) -> None:
    """Write ``input_list[rank]`` summed over all ranks into ``output``."""
    raise NotImplementedError("not implemented yet: world-1 ring steps, then keep your piece")
