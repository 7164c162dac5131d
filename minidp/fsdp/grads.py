"""A unit's gradients: taken from the full parameters, reduce-scattered, added to the shards.

Only the parameters that got a gradient in this backward are reduced (a module of a group
that did not run, a frozen branch: FSDP2 leaves their ``.grad`` as it is, ``None`` at
first). ``set_requires_gradient_sync(False)`` keeps them unsharded instead (``keep_grads``);
``set_all_reduce_hook`` runs a user's hook on the reduced rows, before FSDP2's last divide.

Test: ``pytest tests/test_fsdp.py tests/test_fsdp_moves.py``
"""

from __future__ import annotations

import functools
import math

import torch

from minidp.fsdp import collectives, dtensor, shard
from minidp.fsdp.policy import (
    NO_SYNC_SUMS_IN_ACCUMULATION_DTYPE,
    UNSET_REDUCES_IN_PARAM_DTYPE,
    accumulation_dtype,
    reduce_dtype_for,
)


class Grads:
    """The gradient half of an ``FSDPUnit`` (mixed in: it reads the unit's fields)."""

    def __init__(self, count: int) -> None:
        # per parameter: unreduced earlier gradients, wider than p (FSDP2 <= 2.14's), or None
        self.kept: list[torch.Tensor | None] = [None] * count
        self.reduce_grads = True  # False: keep the gradients unsharded, no reduce-scatter
        self.all_reduce_grads = True  # HSDP, False: reduce-scatter only, add up the rows
        self.partial: torch.Tensor | None = None  # HSDP rows waiting for their all-reduce
        self.all_reduce_hook = None  # set_all_reduce_hook's
        self.took: list[int] = []  # which parameters the last take_grads took

    def _trainable(self):
        return [(i, p) for i, (p, rg) in enumerate(zip(self.full, self.requires_grad)) if rg]

    def take_grads(self) -> list[torch.Tensor]:
        """The full gradients of this backward (those there are), detached from the params."""
        grads, self.took = [], []
        for k, (i, p) in enumerate(self._trainable()):
            if p.grad is not None and p.grad.layout != torch.strided:
                raise RuntimeError(
                    f"fully_shard: {self.names[i]} got a {p.grad.layout} gradient "
                    "but FSDP reduce-scatters dense gradients only — use sparse=False"
                )
            kept, self.kept[k] = self.kept[k], None
            grad = None if p.grad is None else self.layouts[i].local_grad(p.grad)
            if kept is not None and grad is not None:
                kept += grad  # this backward's, onto the wider earlier ones
            if (kept if kept is not None else grad) is not None:
                grads.append(kept if kept is not None else grad)
                self.took.append(i)
            p.grad = None
        return grads

    def prepare_grads(self) -> None:
        """This unit's backward starts: set the dtype autograd sums in (``policy.py``)."""
        if not NO_SYNC_SUMS_IN_ACCUMULATION_DTYPE:
            return  # up to 2.14 autograd sums in the parameters' dtype
        for _, p in self._trainable():
            wide = accumulation_dtype(self.mp, self.param_dtype, self.dtype)
            starts = not self.reduce_grads and p.grad is None
            p.grad_dtype = wide if starts and wide != self.param_dtype else None

    def keep_grads(self) -> None:
        """No gradient sync: the full gradients stay, in FSDP2's accumulation dtype."""
        for k, (_, p) in enumerate(self._trainable()):
            if p.grad is None:
                continue
            dtype = accumulation_dtype(self.mp, p.grad.dtype, self.dtype)
            if NO_SYNC_SUMS_IN_ACCUMULATION_DTYPE and p.grad.dtype != dtype:  # torch >= 2.15
                p.grad_dtype = None  # the wider gradient stays on the parameter, as FSDP2's
                p.grad = p.grad.to(dtype)
            elif p.grad.dtype != dtype:  # aside, as FSDP2 did (and .grad must match p's dtype)
                if self.kept[k] is None:
                    self.kept[k] = p.grad.to(dtype)
                else:
                    self.kept[k] += p.grad
                p.grad = None

    def reduce(self, grads: list[torch.Tensor]) -> torch.Tensor | None:
        """Reduce-scatter the gradients: this rank's ``(T_grad,)`` average, original dtype
        (None: HSDP without the all-reduce this time; the rows wait in ``partial``)."""
        dtypes = {g.dtype for g in grads}
        if len(dtypes) != 1 and UNSET_REDUCES_IN_PARAM_DTYPE:  # 2.15 promotes them instead
            raise AssertionError(
                f"FSDP reduce-scatter expects uniform gradient dtype but got {dtypes} "
                f"({self.label}). Hint: give its trainable parameters one dtype, or wrap "
                "them in separate units"
            )
        # torch's rule; from 2.15 a bf16 policy's float32 gradients (RMSNorm's weight: autograd
        # computes it in float32 and FSDP2 leaves it so) are reduced with the others, promoted
        reduce_dtype = functools.reduce(
            torch.promote_types, {reduce_dtype_for(self.mp, d, self.dtype) for d in dtypes}
        )
        replicas = self.replicate_group.size() if self.replicate_group is not None else 1  # HSDP
        pre, post, op = shard.divide_factors(self.world * replicas, reduce_dtype)
        rows = [shard.to_rows(g, self.world, self.layouts[i].dim) for g, i in zip(grads, self.took)]
        rows = shard.chunk_cat(rows, self.world, reduce_dtype)  # (world, T_grad)
        if pre is not None and pre != 1:
            rows.div_(pre)
        mine = collectives.reduce_scatter(rows.view(-1), op, self.group)  # (T_grad,) local
        if self.replicate_group is not None:  # HSDP: then across the shard's replicas
            if self.partial is not None:
                mine += self.partial
            if not self.all_reduce_grads:
                self.partial = mine
                return None
            self.partial = None
            collectives.all_reduce_(mine, op, self.replicate_group)  # avg: each divides
        if self.all_reduce_hook is not None:
            self.all_reduce_hook(mine)
        if post is not None and post != 1:
            mine.div_(post)
        return mine.to(self.dtype)

    def accumulate(self, flat: torch.Tensor) -> None:
        """Add this rank's reduced ``(T_grad,)`` gradient into the shards' ``.grad``."""
        offset = 0
        for i in self.took:
            row_shape = self.layouts[i].row_shape
            rows = shard.shard_rows(row_shape[0], self.world)
            width = rows * math.prod(row_shape[1:])
            grad = flat[offset : offset + width].view(rows, *row_shape[1:])[: self.length(i)]
            offset += width
            grad = grad.to(self.shard_device)
            param = self.sharded[i]
            if param.grad is None:  # a DTensor like its parameter: norms over it are global
                param.grad = self.layouts[i].describe(grad)
            else:
                dtensor.local(param.grad).add_(grad)
