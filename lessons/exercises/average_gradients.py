"""Exercise (lesson 10): DDP's job after backward — average every gradient over the ranks.

Task: ``loss.backward()`` has run on every rank, each on its own data, so every rank holds
its own ``.grad``. Replace each parameter's ``.grad`` by the **average over all ranks**, in
place, so that every rank ends with the same gradients as
``torch.nn.parallel.DistributedDataParallel`` would have produced.

Tools: ``from minidp.comm import all_reduce`` — ``all_reduce(tensor, "sum", group)`` sums
``tensor`` over the ranks, in place; ``group.size()`` is the number of ranks.

Hints:
* The all-reduce *sums*. Divide by the world size (torch multiplies each gradient by
  ``1 / world_size`` before the sum).
* Reduce ``p.grad`` itself, or copy the result back into it: an all-reduce of a copy
  (``torch.cat``, ``.clone()``) leaves ``.grad`` untouched.
* Every rank must make the same all-reduce calls in the same order (same model, same
  parameter order: fine).

Check: ``python -m minidp exercise check average_gradients``
"""

from torch import nn

from minidp.comm import all_reduce  # noqa: F401  (you will need it)


def average_gradients(model: nn.Module, group) -> None:
    """Every ``p.grad`` of ``model`` becomes its average over the ranks of ``group``."""
    raise NotImplementedError("not implemented yet: all-reduce every .grad, divide by W")
