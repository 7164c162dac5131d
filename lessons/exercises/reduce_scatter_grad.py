"""Exercise (lesson 20): ZeRO-2's reduce-scatter gradient hook.

Task: this function runs as a post-accumulate-grad hook, on every rank, as soon as
``param.grad`` (this rank's local gradient) is ready. Make every rank keep only its piece of
the gradient **averaged over the ranks**, and free the full gradient:

1. Flatten ``param.grad`` and pad it with zeros to a multiple of ``W = group.size()``;
   cut it into ``W`` equal pieces of ``k = ceil(numel / W)`` elements.
2. Reduce-scatter: rank ``r`` receives piece ``r`` summed over all ranks
   (``reduce_scatter(out, pieces, group=group)``); divide it by ``W``.
3. ``param.grad_shard = your piece`` (1-D, ``k`` elements), then ``param.grad = None``.

Tools: ``from minidp.comm import reduce_scatter`` — ``reduce_scatter(output, input_list,
group=group)`` sums ``input_list[r]`` over the ranks into ``output`` on rank ``r``;
``group.rank()``, ``group.size()``.

Hints:
* Pieces must all have the same size: that is what the padding is for.
* A reduce-scatter sums; the gradient DDP would give you is the average.
* Forgetting ``param.grad = None`` still gives the right piece — and saves no memory.

Check: ``python -m minidp exercise check reduce_scatter_grad``
"""

import torch

from minidp.comm import reduce_scatter  # noqa: F401  (you will need it)


def reduce_scatter_grad(param: torch.Tensor, group) -> None:
    """Set ``param.grad_shard`` to this rank's piece of the averaged gradient; free ``.grad``."""
    raise NotImplementedError("not implemented yet: pad, reduce-scatter, divide, free .grad")
