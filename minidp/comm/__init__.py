"""Collectives built only from point-to-point send/recv (any backend: gloo, NCCL).

:func:`ring_all_reduce` (bit-exact with gloo), :func:`naive_all_reduce` (the parameter
server), :func:`all_reduce` (one exchange when small, else the ring), :func:`broadcast`,
:func:`all_gather`, :func:`reduce_scatter` (and torch's ``*_tensor`` forms of both),
:func:`barrier`; :func:`count_traffic`.

Test: ``pytest tests/test_collectives.py``; benchmark: ``python -m minidp bench allreduce``.
"""

from minidp.comm.agree import checked
from minidp.comm.broadcasts import broadcast, broadcast_many
from minidp.comm.collectives import (
    all_gather,
    all_gather_into_tensor,
    all_reduce,
    barrier,
)
from minidp.comm.errors import CollectiveError, CollectiveTimeout, MismatchError, PeerError
from minidp.comm.group import get_rank, get_world_size, use_group
from minidp.comm.naive import naive_all_reduce
from minidp.comm.p2p import channel
from minidp.comm.reduce_scatters import reduce_scatter, reduce_scatter_tensor
from minidp.comm.ring import ring_all_reduce
from minidp.comm.traffic import Traffic, count_traffic

__all__ = [
    "CollectiveError",
    "CollectiveTimeout",
    "MismatchError",
    "PeerError",
    "Traffic",
    "all_gather",
    "all_gather_into_tensor",
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
    "reduce_scatter_tensor",
    "ring_all_reduce",
    "use_group",
]
