"""Exercise (lesson 32): ``clip_grad_norm_`` when each rank holds only shards of the gradients.

Task: ``shards[i]`` is this rank's dim-0 shard of gradient i — its ``torch.chunk`` rows, as
FSDP shards them (a shard may be empty). Do what
``torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type)`` does to the *full*
gradients, on every rank, touching only your shards:

1. the total norm of **all** gradients, over every rank: ``norm_type`` is ``2.0``
   (sqrt of the sum of every squared element) or ``math.inf`` (the largest ``|g|``);
2. scale your shards **in place** by torch's clip coefficient
   ``min(max_norm / (total_norm + 1e-6), 1)``;
3. return the total norm (a float or a 0-dim tensor), the same on every rank.

Tools: ``from minidp.comm import all_reduce`` — ``all_reduce(t, op="sum" | "max",
group=group)``, in place. ``group.rank()``, ``group.size()``. (What to reduce is the
exercise, not how: the collective is given.)

Hints:
* Your shards' norm is only a *part* of the norm: a rank that clipped by it alone would
  scale by another factor than its neighbours, and the replicas would drift apart.
* Norms do not add; squares do: all-reduce your sum of squares (in float64), then sqrt.
  The inf-norm is a maximum: all-reduce with ``op="max"``. An empty shard adds 0.
* ``min(..., 1)``: when the norm is already below ``max_norm``, gradients stay as they are.

Check: ``python -m minidp exercise check clip_grad_norm_shards``
"""

import torch

from minidp.comm import all_reduce  # noqa: F401  (you will need it)


def clip_grad_norm_shards(
    shards: list[torch.Tensor], max_norm: float, norm_type: float, group
) -> float:
    """Clip every rank's shards by the global norm, in place; return that norm."""
    raise NotImplementedError("not implemented yet: all-reduce the local part, clip, return")
