"""One FSDP unit: the parameters one ``fully_shard`` call owns, sharded, gathered, reduced.

State of a unit's parameters, all rank-local:

* ``padded[i]``  ``(rows, *rest)`` in the original dtype — this rank's piece of parameter i,
  zero-padded (``shard.py``). ``sharded[i]`` is an ``nn.Parameter`` viewing its first
  ``length`` rows: what the module holds between steps, what the optimizer steps, where
  the reduced gradient lands (``.grad``).
* ``full[i]``  the unsharded ``nn.Parameter`` (``param_dtype``) the forward and backward
  use. Created once; "freeing" it resizes its storage to 0 bytes, "gathering" resizes it
  back and copies the all-gathered data in. The autograd graph keeps pointing at the same
  storage, so a unit freed after forward and gathered again before backward hands its
  saved tensors the right data again — how FSDP2 frees memory, with public APIs.

The two collectives run on the root's communication thread (``minidp.ddp.comm_thread``),
one after another in the order they were submitted, so every rank runs the same sequence:
``gather`` (all-gather of the flat ``(T,)`` shards into ``(world, T)``) and ``reduce``
(reduce-scatter of the ``(world, T)`` padded gradients into this rank's ``(T,)``, in the
order gloo's reduce-scatter adds them: ``reduce.py``).

Test: ``pytest tests/test_fsdp.py``
"""

from __future__ import annotations

import math

import torch
from torch import nn

from minidp.comm import all_reduce
from minidp.comm.collectives import all_gather_into_tensor
from minidp.fsdp import post_forward, shard
from minidp.fsdp.grad import ShardedGrad
from minidp.fsdp.policy import (
    NO_SYNC_SUMS_IN_ACCUMULATION_DTYPE,
    MixedPrecisionPolicy,
    accumulation_dtype,
    reduce_dtype_for,
)
from minidp.fsdp.reduce import gloo_reduce_scatter

UNIT_ATTR = "_minidp_fsdp_unit"  # where fully_shard keeps a module's unit


def unit_of(module: nn.Module) -> FSDPUnit | None:
    """The FSDP unit ``fully_shard`` made of ``module``, or None."""
    return module.__dict__.get(UNIT_ATTR)


class FSDPUnit:
    """The sharded parameters of one wrapped module, and how to gather and reduce them."""

    def __init__(self, module, names, params, locations, group, reshard_after_forward, mp):
        self.module = module
        self.names = names  # names relative to ``module`` (tied parameters once)
        self.locations = locations  # per parameter: [(submodule, attribute), ...]
        self.group = group  # the shard group: gathers, reduce-scatters
        self.replicate_group = None  # HSDP: the same shard's replicas (all-reduce after)
        self.rank, self.world = group.rank(), group.size()
        self.reshard_after_forward = reshard_after_forward  # True, False, or an int k
        self.post_group = None  # int k: the k ranks this rank reshards to after forward
        self.post_kept: list[torch.Tensor] | None = None  # this rank's chunks over that group
        self.mp = mp or MixedPrecisionPolicy()
        self.shapes = [p.shape for p in params]
        self.requires_grad = [p.requires_grad for p in params]
        self.dtype = params[0].dtype if params else torch.float32
        self.device = params[0].device if params else torch.device("cpu")
        self.param_dtype = self.mp.param_dtype or self.dtype
        with torch.no_grad():
            self.padded = [shard.padded_shard(p.detach(), self.world, self.rank) for p in params]
        self.sharded = [
            nn.Parameter(pad[: shard.shard_length(s[0], self.world, self.rank)], p.requires_grad)
            for pad, s, p in zip(self.padded, self.shapes, params)
        ]
        self.full: list[nn.Parameter] = []  # created at the first gather
        self.is_unsharded = False
        self.reduce_grads = True  # False: keep the gradients unsharded, no reduce-scatter
        self.reshard_after_backward = True  # False: stay gathered for the next forward
        self.kept_gathered = False  # gathered at the end of the last backward, on purpose
        # explicit prefetch targets (set_modules_to_{forward,backward}_prefetch), else None:
        # the root's implicit choice (the next unit in last step's order / the one before)
        self.forward_prefetch: list[FSDPUnit] | None = None
        self.backward_prefetch: list[FSDPUnit] | None = None
        # per parameter: unreduced gradients of earlier backwards in a wider dtype than the
        # parameter's (FSDP2 <= 2.14's "accumulated grad"), else None
        self.kept: list[torch.Tensor | None] = [None] * len(params)
        self.root = None  # the Root coordinating this unit's model, set at the first forward
        self.pending = 0  # gradients still to arrive in this backward
        self.hooks: list = []  # post-accumulate-grad hooks on the full parameters
        self.label = type(module).__name__  # the root renames it by position, for traces
        self.install(self.sharded)

    # ---- which tensors the module holds ------------------------------------------------

    def install(self, params: list[nn.Parameter]) -> None:
        """Register ``params`` on the module at every place the originals were (tied: all)."""
        for param, places in zip(params, self.locations):
            for module, attr in places:
                setattr(module, attr, param)  # nn.Module.__setattr__ re-registers it

    def free(self) -> None:
        """Reshard: the module holds the shards again; the full storages drop to 0 bytes."""
        for p in self.full:
            p.untyped_storage().resize_(0)
        self.install(self.sharded)
        self.is_unsharded = False
        self.post_kept = None

    def reshard_after_forward_now(self) -> None:
        """After forward: free, keeping a chunk over the k-group first if k is an int."""
        kept = post_forward.keep(self.full, self.post_group) if self.post_group else None
        self.free()
        self.post_kept = kept

    @torch.no_grad()
    def follow_module(self) -> None:
        """Adopt what ``nn.Module``'s own moves did to the shards since the last step.

        ``model.to(torch.float64)`` swaps each shard's ``.data`` for a converted copy (no
        longer a view of ``padded``); ``model.to_empty(device=...)`` after building on the
        meta device puts *new* Parameters on the modules (and unties tied ones). Either way
        the module holds the truth: copy it into fresh padded buffers, make the shards view
        them again, and put them back at every place (tied ones too). The gathered
        parameters are made anew at the next gather, in the new dtype.
        """
        if self.is_unsharded:
            return
        changed = False
        for i, places in enumerate(self.locations):
            module, attr = places[0]
            held, pad, mine = getattr(module, attr), self.padded[i], self.sharded[i]
            moved = held.dtype != pad.dtype or held.device != pad.device
            if held is mine and not moved and held.data_ptr() == pad.data_ptr():
                continue  # (a zero-row shard's pointer equals its buffer's too)
            fresh = torch.zeros(pad.shape, dtype=held.dtype, device=held.device)
            fresh[: held.shape[0]].copy_(held.detach())
            self.padded[i] = fresh
            if mine.device.type == fresh.device.type:  # the same Parameter: optimizers keep it
                mine.data = fresh[: held.shape[0]]
            else:  # meta -> cpu: .data cannot change device type; a new Parameter (no optimizer
                # can hold the meta one usefully yet)
                self.sharded[i] = nn.Parameter(fresh[: held.shape[0]], mine.requires_grad)
                self.sharded[i].__dict__.update(mine.__dict__)  # wrap.py's markers
            changed = True
        if changed:
            self.install(self.sharded)
            self.dtype, self.device = self.padded[0].dtype, self.padded[0].device
            self.param_dtype = self.mp.param_dtype or self.dtype
            for h in self.hooks:
                h.remove()
            self.full, self.hooks = [], []

    def follow_requires_grad(self) -> bool:
        """Adopt ``requires_grad_()`` calls made since the last step (True if any changed).

        Between steps the module holds the shards, so that is where a user freezes or
        unfreezes; FSDP2 follows such calls too. The full parameters take the new flags, and
        the gradient hooks are dropped: the root counts the new set again (``Root.unshard``).
        """
        now = [p.requires_grad for p in self.sharded]
        if now == self.requires_grad:
            return False
        self.requires_grad = now
        self.kept = [None] * len(self.kept)  # indexed by trainable position: that changed
        for p, rg in zip(self.full, now):
            p.requires_grad_(rg)
            p.grad = None
        for h in self.hooks:
            h.remove()
        self.hooks = []
        return True

    # ---- collectives (run on the communication thread) ---------------------------------

    def flat_shards(self, dtype: torch.dtype) -> torch.Tensor:
        """``(T,)`` this rank's padded shards end to end, in ``dtype``."""
        if not self.padded:
            return torch.empty(0, dtype=dtype, device=self.device)
        return torch.cat([p.reshape(-1) for p in self.padded]).to(dtype)

    def gather_full(self, dtype: torch.dtype) -> list[torch.Tensor]:
        """All-gather: every full parameter as a view of one new ``(world, T)`` buffer in
        ``dtype`` (a collective). This rank's shards are written (cast) straight into its
        own row, and the others arrive in theirs: no list of outputs, no stacking copy."""
        if not self.shapes:  # a root whose layers are all units of their own: like FSDP2,
            return []  # no parameters, no collective (an empty one still costs a check)
        total = sum(p.numel() for p in self.padded)  # T
        rows = torch.empty(self.world, total, dtype=dtype, device=self.device)  # (world, T)
        offset = 0
        for p in self.padded:  # this rank's row: its padded shards end to end
            rows[self.rank, offset : offset + p.numel()].copy_(p.reshape(-1))
            offset += p.numel()
        all_gather_into_tensor(rows, rows[self.rank], group=self.group)
        return shard.uncat(rows, self.shapes, self.world)  # (world, T) -> full views

    def gather(self) -> None:
        """All-gather into the ``full`` parameters' storages (allocating them again)."""
        if self.post_kept is not None:  # resharded to k ranks: gather within them only
            fulls = post_forward.gather(self.post_kept, self.shapes, self.post_group)
            self.post_kept = None
        else:
            fulls = self.gather_full(self.param_dtype)
        if not self.full:
            self.full = [
                nn.Parameter(torch.empty(s, dtype=self.param_dtype, device=self.device), rg)
                for s, rg in zip(self.shapes, self.requires_grad)
            ]
        with torch.no_grad():
            for p, data in zip(self.full, fulls):
                p.untyped_storage().resize_(p.numel() * p.element_size())
                p.data.copy_(data)  # .data: a fresh version counter, saved tensors stay valid

    def take_grads(self) -> list[torch.Tensor]:
        """The full gradients of this backward, detached from the full parameters."""
        grads = []
        for p, rg in zip(self.full, self.requires_grad):
            if rg:
                if p.grad is not None and p.grad.layout != torch.strided:
                    raise RuntimeError(
                        f"fully_shard: {self.names[len(grads)]} got a {p.grad.layout} gradient "
                        "but FSDP reduce-scatters dense gradients only — use sparse=False"
                    )
                i = len(grads)
                kept, self.kept[i] = self.kept[i], None
                if kept is not None and p.grad is not None:
                    kept += p.grad  # this backward's, onto the wider earlier ones
                grads.append(p.grad if kept is None else kept)
                p.grad = None
        return grads

    def prepare_grads(self) -> None:
        """This unit's backward starts: the dtype autograd sums its gradients in (FSDP2's
        ``grad_dtype`` rule of the installed torch, ``policy.py``)."""
        if not NO_SYNC_SUMS_IN_ACCUMULATION_DTYPE:
            return  # up to 2.14 autograd sums in the parameters' dtype
        for p, rg in zip(self.full, self.requires_grad):
            if rg:
                wide = accumulation_dtype(self.mp, self.param_dtype, self.dtype)
                starts = not self.reduce_grads and p.grad is None
                p.grad_dtype = wide if starts and wide != self.param_dtype else None

    def keep_grads(self) -> None:
        """A backward without gradient sync ended for this unit: its full gradients stay on
        the full parameters (freeing the unit frees the parameters' storage, not the
        gradients), in FSDP2's accumulation dtype, and the next backward adds to them."""
        trainable = [p for p, rg in zip(self.full, self.requires_grad) if rg]
        for i, p in enumerate(trainable):
            if p.grad is None:
                continue
            dtype = accumulation_dtype(self.mp, p.grad.dtype, self.dtype)
            if NO_SYNC_SUMS_IN_ACCUMULATION_DTYPE and p.grad.dtype != dtype:  # torch >= 2.15
                p.grad_dtype = None  # the wider gradient stays on the parameter, as FSDP2's
                p.grad = p.grad.to(dtype)
            elif p.grad.dtype != dtype:  # aside, as FSDP2 did (and .grad must match p's dtype)
                if self.kept[i] is None:
                    self.kept[i] = p.grad.to(dtype)
                else:
                    self.kept[i] += p.grad
                p.grad = None

    def reduce(self, grads: list[torch.Tensor]) -> torch.Tensor:
        """Reduce-scatter the gradients: this rank's ``(T_grad,)`` average, original dtype."""
        reduce_dtype = reduce_dtype_for(self.mp, grads[0].dtype, self.dtype)  # torch's rule
        replicas = self.replicate_group.size() if self.replicate_group is not None else 1
        # the average runs over every data-parallel rank: shard group x replicas
        pre, post, op = shard.divide_factors(self.world * replicas, reduce_dtype)
        rows = shard.chunk_cat(grads, self.world, reduce_dtype)  # (world, T_grad)
        if pre is not None and pre != 1:
            rows.div_(pre)
        # gloo's bits (minidp.comm.reduce_scatter would round a few elements differently
        # from 3 ranks on: it adds in another order — see reduce.py)
        mine = gloo_reduce_scatter(rows.view(-1), op, self.group)  # (T_grad,) rank-local
        if self.replicate_group is not None:  # HSDP: then across the shard's replicas
            all_reduce(mine, op, self.replicate_group)  # avg: each step divides by its size
        if post is not None and post != 1:
            mine.div_(post)
        return mine.to(self.dtype)

    def accumulate(self, flat: torch.Tensor) -> None:
        """Add this rank's reduced ``(T_grad,)`` gradient into the shards' ``.grad``."""
        offset = 0
        for param, full_shape, rg in zip(self.sharded, self.shapes, self.requires_grad):
            if not rg:
                continue
            rows = shard.shard_rows(full_shape[0], self.world)
            width = rows * math.prod(full_shape[1:])
            grad = flat[offset : offset + width].view(rows, *full_shape[1:])[: param.shape[0]]
            offset += width
            if param.grad is None:  # global norms over it, for clip_grad_norm_ (grad.py)
                param.grad = ShardedGrad.wrap(grad, self.group)
            else:
                param.grad += grad
