"""Exercise (lesson 37): HSDP's gradient reduction on a 2-D mesh (replicate × shard).

Task: the ``W = R * S`` ranks form a grid (row-major, like ``init_device_mesh((R, S))``):
your row is ``shard_group`` (S ranks that split every parameter between them), your
column is ``replicate_group`` (R ranks that hold the same shard, each training on its own
batches). ``grad`` is this rank's full local gradient. Return **your shard of the gradient
averaged over all W ranks**: rows ``torch.chunk(grad, S)[shard_group.rank()]`` of dim 0
(an empty tensor, shape ``(0, ...)``, when the chunks run out), in ``grad``'s dtype — in
HSDP's two steps:

1. reduce-scatter within ``shard_group``: pad dim 0 to a multiple of S rows
   (``k = ceil(rows / S)`` rows per piece), cut into S pieces, and keep your piece summed
   over your row;
2. all-reduce that piece across ``replicate_group``; divide by W once, and cut the padding
   off (keep the rows your chunk has).

Tools: ``from minidp.comm import reduce_scatter, all_reduce`` —
``reduce_scatter(out, pieces, group=shard_group)`` and ``all_reduce(t,
group=replicate_group)`` (in place; both take ``op="avg"`` too). ``group.rank()``,
``group.size()``. (What to reduce where is the exercise; the collectives are given. The
groups refuse anything but rank/size/send/recv, which those are built from.)

Hints:
* Step 1 alone averages over your row only: the other rows' ranks hold the same shard
  of other batches' gradients.
* The average is over all W = R * S ranks: divide by both groups' sizes, once each.
* All-reducing the *whole* gradient (in the shard group, or across replicas before the
  reduce-scatter) gives the right numbers but moves up to S times the bytes: the checker
  counts them.

Check: ``python -m minidp exercise check hsdp_reduce``
"""

import torch

from minidp.comm import all_reduce, reduce_scatter  # noqa: F401  (you will need them)


def hsdp_reduce(grad: torch.Tensor, shard_group, replicate_group) -> torch.Tensor:
    """This rank's ``torch.chunk`` rows of the gradient averaged over every rank."""
    raise NotImplementedError(
        "not implemented yet: reduce-scatter in shard_group, all-reduce in replicate_group"
    )
