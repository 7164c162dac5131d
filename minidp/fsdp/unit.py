"""One FSDP unit: the parameters one ``fully_shard`` call owns, sharded, gathered, reduced.

Per parameter ``i``, rank-local: ``padded[i]`` ``(rows, *rest)``, this rank's zero-padded
piece (``shard.py``) that the all-gather sends; ``sharded[i]``, the DTensor parameter on
the module over the real rows of ``padded[i]``: what the optimizer steps; ``full[i]``, the
unsharded parameter (``param_dtype``) forward and backward use, made once: "free" resizes
its storage to 0 bytes and "gather" back, so autograd's saved tensors stay valid (FSDP2's
way, with public APIs).

Test: ``pytest tests/test_fsdp.py``
"""

from __future__ import annotations

import math

import torch
from torch import nn

from minidp.comm import all_reduce
from minidp.comm.collectives import all_gather_into_tensor
from minidp.fsdp import dtensor, post_forward, shard
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

    def __init__(self, module, names, params, locations, group, mesh, reshard_after_forward, mp):
        self.module = module
        self.names = names  # names relative to ``module`` (tied parameters once)
        self.locations = locations  # per parameter: [(submodule, attribute), ...]
        self.group = group  # the shard group: gathers, reduce-scatters
        self.replicate_group = None  # HSDP: the same shard's replicas (all-reduce after)
        self.mesh = mesh  # the torch DeviceMesh the shards are DTensors on (None: plain)
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
        # replaced ONCE, here: DTensor parameters viewing the real rows of the padded pieces
        self.padded: list[torch.Tensor] = []
        self.sharded: list[nn.Parameter] = []
        for p in params:
            with torch.no_grad():  # (meta stays meta)
                self.padded.append(shard.padded_shard(p.detach(), self.world, self.rank))
            view = self.padded[-1][: shard.shard_length(p.shape[0], self.world, self.rank)]
            held = dtensor.as_sharded(view, mesh, p.shape)
            self.sharded.append(nn.Parameter(held, requires_grad=p.requires_grad))
        self.full: list[nn.Parameter] = []  # created at the first gather
        self.is_unsharded = False
        self.reduce_grads = True  # False: keep the gradients unsharded, no reduce-scatter
        self.reshard_after_backward = True  # False: stay gathered for the next forward
        self.kept_gathered = False  # gathered at the end of the last backward, on purpose
        # set_modules_to_{forward,backward}_prefetch's targets; None: the root's choice
        self.forward_prefetch: list[FSDPUnit] | None = None
        self.backward_prefetch: list[FSDPUnit] | None = None
        # per parameter: unreduced earlier gradients, wider than p (FSDP2 <= 2.14's), or None
        self.kept: list[torch.Tensor | None] = [None] * len(params)
        self.root = None  # the Root coordinating this unit's model, set at the first forward
        self.hooks: list = []  # post-accumulate-grad hooks on the full parameters
        self.label = type(module).__name__  # the root renames it by position, for traces
        self.install(self.sharded)

    # ---- which tensors the module holds ------------------------------------------------
    def install(self, params: list[nn.Parameter]) -> None:
        """Register ``params`` on the module at every place the originals were (tied: all)."""
        for param, places in zip(params, self.locations):
            for module, attr in places if param is not None else ():
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

    def local(self, i: int) -> torch.Tensor:
        """This rank's rows of parameter i: a plain view of ``padded[i]``."""
        return dtensor.local(self.sharded[i]).detach()

    @torch.no_grad()
    def adopt(self) -> None:
        """Adopt what ``to_empty``/``to(dtype)`` (new contents) or ``load_state_dict(assign=True)``
        (a new Parameter) did to the shards: re-pad what the module holds, re-point it."""
        if self.is_unsharded:
            return
        changed = False
        for i, places in enumerate(self.locations):
            module, attr = places[0]
            held, pad = getattr(module, attr), self.padded[i]
            if held is not self.sharded[i]:
                held.__dict__.update(self.sharded[i].__dict__)  # wrap.py's markers
                self.sharded[i] = held
                self.install([held if j == i else None for j in range(len(self.sharded))])
            rows = dtensor.local(held)
            same = (rows.dtype, rows.device) == (pad.dtype, pad.device)
            if same and rows.untyped_storage().data_ptr() == pad.untyped_storage().data_ptr():
                continue  # (a zero-row shard's pointer equals its buffer's too)
            self.padded[i] = torch.zeros(pad.shape, dtype=rows.dtype, device=rows.device)
            self.padded[i][: rows.shape[0]].copy_(rows)
            dtensor.repoint(held, self.padded[i][: rows.shape[0]], self.mesh)
            changed = True
        if changed:
            self.dtype, self.device = self.padded[0].dtype, self.padded[0].device
            self.param_dtype = self.mp.param_dtype or self.dtype
            for h in self.hooks:
                h.remove()
            self.full, self.hooks = [], []

    def follow_requires_grad(self) -> bool:
        """Adopt ``requires_grad_()`` calls on the shards, as FSDP2 does (True if any changed)."""
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
        self._check_not_meta()
        if not self.padded:
            return torch.empty(0, dtype=dtype, device=self.device)
        return torch.cat([p.reshape(-1) for p in self.padded]).to(dtype)

    def _check_not_meta(self) -> None:
        if self.device.type == "meta":
            raise RuntimeError(
                f"fully_shard: {self.label}'s shards are on the meta device, so there is "
                "nothing to gather. Hint: model.to_empty(device=...) and initialise the "
                "parameters (model.reset_parameters() or a state dict) after fully_shard, "
                "before the first forward or unshard()"
            )

    def gather_full(self, dtype: torch.dtype) -> list[torch.Tensor]:
        """All-gather: the full parameters, views of one ``(world, T)`` buffer in ``dtype``."""
        if not self.shapes:  # no parameters (all in inner units): no collective, as FSDP2
            return []
        self._check_not_meta()
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
        """This unit's backward starts: set the dtype autograd sums in (``policy.py``)."""
        if not NO_SYNC_SUMS_IN_ACCUMULATION_DTYPE:
            return  # up to 2.14 autograd sums in the parameters' dtype
        for p, rg in zip(self.full, self.requires_grad):
            if rg:
                wide = accumulation_dtype(self.mp, self.param_dtype, self.dtype)
                starts = not self.reduce_grads and p.grad is None
                p.grad_dtype = wide if starts and wide != self.param_dtype else None

    def keep_grads(self) -> None:
        """No gradient sync: the full gradients stay, in FSDP2's accumulation dtype."""
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
        replicas = self.replicate_group.size() if self.replicate_group is not None else 1  # HSDP
        pre, post, op = shard.divide_factors(self.world * replicas, reduce_dtype)
        rows = shard.chunk_cat(grads, self.world, reduce_dtype)  # (world, T_grad)
        if pre is not None and pre != 1:
            rows.div_(pre)
        # gloo's bits (minidp.comm.reduce_scatter adds in another order: reduce.py)
        mine = gloo_reduce_scatter(rows.view(-1), op, self.group)  # (T_grad,) rank-local
        if self.replicate_group is not None:  # HSDP: then across the shard's replicas
            all_reduce(mine, op, self.replicate_group)  # avg: each step divides by its size
        if post is not None and post != 1:
            mine.div_(post)
        return mine.to(self.dtype)

    def accumulate(self, flat: torch.Tensor) -> None:
        """Add this rank's reduced ``(T_grad,)`` gradient into the shards' ``.grad``."""
        offset = 0
        for i, (param, full_shape) in enumerate(zip(self.sharded, self.shapes)):
            if not self.requires_grad[i]:
                continue
            rows = shard.shard_rows(full_shape[0], self.world)
            width = rows * math.prod(full_shape[1:])
            length = shard.shard_length(full_shape[0], self.world, self.rank)
            grad = flat[offset : offset + width].view(rows, *full_shape[1:])[:length]
            offset += width
            if param.grad is None:  # a DTensor like its parameter: norms over it are global
                param.grad = dtensor.as_sharded(grad, self.mesh, full_shape)
            else:
                dtensor.local(param.grad).add_(grad)
