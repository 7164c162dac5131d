"""Collectives built only from point-to-point send/recv (any backend: gloo, NCCL).

* :func:`ring_all_reduce` — reduce-scatter + all-gather, bit-exact with gloo's all-reduce.
* :func:`naive_all_reduce` — the parameter server, kept beside the ring to compare.
* :func:`all_reduce` — "auto" by default: small tensors in one exchange
  (``direct.py``, the ring's bits), the ring above 256 KiB; or ``algorithm=``.
* :func:`broadcast` (and :func:`broadcast_many`, several at once), :func:`all_gather`,
  :func:`reduce_scatter`, :func:`barrier`.
* :func:`count_traffic` — bytes and messages per rank, to measure the two algorithms.
* :func:`channel` — a tag space of this thread's own, for collectives that run on the
  same group as another thread's (DDP's comm thread uses one).

Test: ``pytest tests/test_collectives.py``; benchmark: ``python -m minidp bench allreduce``.
"""

from minidp.comm.agree import checked
from minidp.comm.broadcasts import broadcast, broadcast_many
from minidp.comm.collectives import all_gather, all_reduce, barrier, reduce_scatter
from minidp.comm.errors import CollectiveError, CollectiveTimeout, MismatchError, PeerError
from minidp.comm.group import get_rank, get_world_size, use_group
from minidp.comm.naive import naive_all_reduce
from minidp.comm.p2p import channel
from minidp.comm.ring import ring_all_reduce
from minidp.comm.traffic import Traffic, count_traffic

__all__ = [
    "CollectiveError",
    "CollectiveTimeout",
    "MismatchError",
    "PeerError",
    "Traffic",
    "all_gather",
    "all_reduce",
    "barrier",
    "broadcast",
    "broadcast_many",
    "channel",
    "checked",
    "count_traffic",
    "get_rank",
    "get_world_size",
    "naive_all_reduce",
    "reduce_scatter",
    "ring_all_reduce",
    "use_group",
]
