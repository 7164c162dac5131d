"""Exercise (lesson 19): ZeRO-1's step — every rank steps only what it owns, then shares it.

Task: ``loss.backward()`` has run on every rank, each on its own data. ``optimizer`` is an
ordinary ``torch.optim.SGD`` (with momentum) built over **only the parameters this rank
owns**; ``owners[i]`` is the rank that owns ``list(model.parameters())[i]`` (torch's rule:
largest first, to the rank with the fewest elements so far). Make every rank end with the
parameters that torch's ``ZeroRedundancyOptimizer`` + ``DistributedDataParallel`` produce.

Tools: ``from minidp.comm import all_reduce, broadcast`` — ``all_reduce(t, "sum", group)``
sums ``t`` over the ranks in place; ``broadcast(t, group=group, group_src=r)`` copies group
rank ``r``'s ``t`` to every rank, in place; ``group.size()`` is the number of ranks.

Hints:
* First every ``.grad`` must become the average over the ranks, as DDP does (divide by
  the world size, then sum).
* ``optimizer.step()`` moves only this rank's parameters (and keeps only their momentum:
  that is the memory ZeRO-1 saves).
* Then every parameter must travel from its owner to everyone — the same broadcasts, in
  the same order, on every rank. Under ``torch.no_grad()``: they are leaf parameters.

Check: ``python -m minidp exercise check zero1_step``
"""

from torch import nn

from minidp.comm import all_reduce, broadcast  # noqa: F401  (you will need them)


def zero1_step(model: nn.Module, optimizer, owners: list[int], group) -> None:
    """Average the gradients, step this rank's share, broadcast each parameter from its owner."""
    raise NotImplementedError("not implemented yet: all-reduce / W, step, broadcast from owners")
