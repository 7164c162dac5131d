"""Exercise (lesson 21): one FSDP unit's forward and backward, from this rank's shards.

Task: each rank holds only its dim-0 **shard** of every parameter of ``module``:
``shards[name]`` is this rank's ``torch.chunk(param, world)`` piece (unpadded; possibly
0 rows when the parameter has fewer rows than there are ranks). ``module``'s own
parameters hold zeros — only their shapes are real. Do what one FSDP unit does in a step:

1. all-gather every parameter's full value from the shards of all ranks;
2. run the forward on ``x`` with the full parameters, and the backward with ``grad_out``
   (the gradient of the loss with respect to the output);
3. reduce-scatter every gradient so that this rank gets the **average over the ranks**
   of its own rows.

Return ``(output, grad_shards)``: the forward's output and ``{name: this rank's rows of
the averaged gradient}`` — the same shape as ``shards[name]``.

Tools: ``from minidp.comm import all_gather, reduce_scatter`` (``all_gather(list_out,
tensor, group)``, ``reduce_scatter(out, list_in, op, group)``: equal sizes on every
rank); ``torch.func.functional_call(module, {name: tensor}, (x,))`` runs ``module``
with the tensors you pass instead of its own parameters; ``group.size()``, ``group.rank()``.

Hints:
* Shards differ in length (5 rows on 3 ranks: 2, 2, 1). Collectives need equal pieces:
  pad every shard to ``ceil(rows / world)`` rows, gather, then cut the padding off.
* Make the gathered parameters leaves that require grad (``.requires_grad_()``), so
  ``backward`` fills their ``.grad``.
* The gradient goes the other way: pad it to ``world * ceil(rows / world)`` rows, cut it
  into ``world`` equal pieces (``.chunk``), reduce-scatter with ``op="avg"``, then keep
  only your real rows.

Check: ``python -m minidp exercise check fsdp_unit``
"""

import torch
from torch import nn

from minidp.comm import all_gather, reduce_scatter  # noqa: F401  (you will need them)


def fsdp_unit(
    module: nn.Module,
    shards: dict[str, torch.Tensor],
    x: torch.Tensor,
    grad_out: torch.Tensor,
    group,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Gather, forward, backward, reduce-scatter: (output, {name: averaged grad shard})."""
    raise NotImplementedError("not implemented yet: all-gather, forward/backward, reduce-scatter")
