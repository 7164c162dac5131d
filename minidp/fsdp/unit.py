"""One FSDP unit: the parameters one ``fully_shard`` call owns, sharded, gathered, reduced.

Per parameter ``i``, rank-local: ``padded[i]`` ``(rows, *rest)``, this rank's zero-padded
piece (``shard.py``) that the all-gather sends; ``sharded[i]``, the DTensor parameter on
the module over the real rows of ``padded[i]``: what the optimizer steps; ``full[i]``, the
unsharded parameter (``param_dtype``) forward and backward use, made once: "free" resizes
its storage to 0 bytes and "gather" back, so autograd's saved tensors stay valid (FSDP2's
way, with public APIs). Gradients: ``grads.py``. One unit may serve several modules
(``fully_shard([a, b])``): one gather, one reduce-scatter for all of them.

Test: ``pytest tests/test_fsdp.py``
"""

from __future__ import annotations

import torch
from torch import nn

from minidp.fsdp import collectives, dtensor, post_forward, shard
from minidp.fsdp.grads import Grads
from minidp.fsdp.policy import MixedPrecisionPolicy

UNIT_ATTR = "_minidp_fsdp_unit"  # where fully_shard keeps a module's unit


def unit_of(module: nn.Module) -> FSDPUnit | None:
    """The FSDP unit ``fully_shard`` made of ``module``, or None."""
    return module.__dict__.get(UNIT_ATTR)


class FSDPUnit(Grads):
    """The sharded parameters of one wrapped module (or group of modules), and how to
    gather and reduce them. ``layouts[i]``: how parameter ``i`` is cut and described."""

    def __init__(self, modules, owned, group, mesh, layouts, reshard, mp, offload, device):
        self.modules = modules  # the modules this unit wraps (fully_shard([a, b]): several)
        self.module = modules[0]
        names, params, locations = owned
        self.names = names  # names relative to its module (tied parameters once)
        self.locations = locations  # per parameter: [(submodule, attribute), ...]
        self.group = group  # the shard group: gathers, reduce-scatters
        self.replicate_group = None  # HSDP: the same shard's replicas (all-reduce after)
        self.mesh = mesh  # the torch DeviceMesh the shards are DTensors on (None: plain)
        self.rank, self.world = group.rank(), group.size()
        self.reshard_after_forward = reshard  # True, False, or an int k
        self.post_group = None  # int k: the k ranks this rank reshards to after forward
        self.post_kept: list[torch.Tensor] | None = None  # this rank's chunks over that group
        self.mp = mp or MixedPrecisionPolicy()
        self.offload = offload  # CPUOffloadPolicy: the shards live in host memory
        self.layouts = layouts
        self.shapes = [lay.shape for lay in layouts]  # what FSDP gathers (a TP param: local)
        self.requires_grad = [p.requires_grad for p in params]
        self.device = device  # where the unit computes (and gathers)
        # replaced ONCE, here: DTensor parameters viewing the real rows of the padded pieces
        self.padded: list[torch.Tensor] = []
        self.sharded: list[nn.Parameter] = []
        for p, lay in zip(params, layouts):
            with torch.no_grad():  # (meta stays meta)
                rows = shard.to_rows(dtensor.local(p).detach(), self.world, lay.dim)
                piece = shard.padded_shard(rows, self.world, self.rank)
                self.padded.append(piece.cpu() if offload and not piece.is_meta else piece)
            held = lay.describe(self.padded[-1][: self.length(len(self.padded) - 1)])
            self.sharded.append(nn.Parameter(held, requires_grad=p.requires_grad))
        self._set_dtypes()
        self.full: list[nn.Parameter] = []  # created at the first gather
        self.full_local: list[torch.Tensor] = []  # their plain tensors (a TP param: local)
        self.is_unsharded = False
        self.reshard_after_backward = True  # False: stay gathered for the next forward
        self.unshard_in_backward = True  # False: backward needs no parameter (embeddings)
        self.kept_gathered = False  # gathered at the end of the last backward, on purpose
        # set_modules_to_{forward,backward}_prefetch's targets; None: the root's choice
        self.forward_prefetch: list[FSDPUnit] | None = None
        self.backward_prefetch: list[FSDPUnit] | None = None
        self.to_run: set[int] = set()  # id() of this pass's modules not yet run (a group)
        self.post_optim_event = None  # set_post_optim_event's: synchronized before gathering
        self.root = None  # the Root coordinating this unit's model, set at the first forward
        self.is_root: bool | None = None  # set once a root claims the unit (FSDP2's _is_root)
        self.hooks: list = []  # post-accumulate-grad hooks on the full parameters
        self.state = None  # its FSDP2-named view (introspect.py), made when asked for
        self.label = type(self.module).__name__  # the root renames it by position, for traces
        super().__init__(len(params))
        self.install(self.sharded)

    def _set_dtypes(self) -> None:
        """``dtype``: the trainable parameters' (FSDP2's original dtype; a frozen fp8 weight
        may sit beside them); ``param_dtype``: what forward computes in."""
        trainable = [p.dtype for p, rg in zip(self.padded, self.requires_grad) if rg]
        found = trainable or [p.dtype for p in self.padded] or [torch.float32]
        self.dtype = found[0]
        self.param_dtype = self.mp.param_dtype or self.dtype

    def gather_dtypes(self, dtype: torch.dtype | None) -> list[torch.dtype]:
        """Each parameter's all-gather dtype: ``dtype`` for floating point ones (None: their
        own), the others' own (mixed precision casts floating point only, as FSDP2)."""
        return [dtype if dtype and p.is_floating_point() else p.dtype for p in self.padded]

    @property
    def shard_device(self) -> torch.device:
        """Where the shards live: host memory under ``CPUOffloadPolicy``, else the device."""
        return torch.device("cpu") if self.offload else self.device

    def length(self, i: int) -> int:
        """Rows of real data in this rank's piece of parameter i (dim-0 row form)."""
        return shard.shard_length(self.layouts[i].row_shape[0], self.world, self.rank)

    # ---- which tensors the module holds ------------------------------------------------
    def install(self, params: list[nn.Parameter]) -> None:
        """Register ``params`` on the module at every place the originals were (tied: all)."""
        for param, places in zip(params, self.locations):
            for module, attr in places if param is not None else ():
                setattr(module, attr, param)  # nn.Module.__setattr__ re-registers it

    def free(self) -> None:
        """Reshard: the module holds the shards again; the full storages drop to 0 bytes."""
        for p in self.full_local:
            p.untyped_storage().resize_(0)
        self.install(self.sharded)
        self.is_unsharded = False
        self.post_kept = None

    def reshard_after_forward_now(self) -> None:
        """After forward: free, keeping a chunk over the k-group first if k is an int."""
        kept = post_forward.keep(self.full_local, self.post_group) if self.post_group else None
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
            dtensor.repoint(held, self.padded[i][: rows.shape[0]], *self.layouts[i].where())
            changed = True
        if changed:
            if self.padded[0].device.type != "cpu" or not self.offload:
                self.device = self.padded[0].device
            self._set_dtypes()
            self.unhook()
            self.full, self.full_local = [], []

    def follow_requires_grad(self) -> bool:
        """Adopt ``requires_grad_()`` calls on what the module holds (the shards, or the full
        parameters of a unit kept gathered), as FSDP2 does (True if any changed)."""
        now = [getattr(*places[0]).requires_grad for places in self.locations]
        if now == self.requires_grad:
            return False
        for p, rg in zip(self.sharded, now):
            p.requires_grad_(rg)
        self.requires_grad = now
        self.kept = [None] * len(self.kept)  # indexed by trainable position: that changed
        for p, rg in zip(self.full, now):
            p.requires_grad_(rg)
            p.grad = None
        self.unhook()
        return True

    def unhook(self) -> None:
        """Remove the gradient hooks of the full parameters (the root's queue holds them)."""
        if self.hooks:
            self.root.queue.remove(self.hooks)
            self.hooks = []

    # ---- collectives (run on the communication thread) ---------------------------------
    def flat_shards(self, dtype: torch.dtype) -> torch.Tensor:
        """``(T,)`` this rank's padded shards end to end, in ``dtype``."""
        self.check_not_meta()
        if not self.padded:
            return torch.empty(0, dtype=dtype, device=self.device)
        return torch.cat([p.reshape(-1) for p in self.padded]).to(dtype)

    def check_not_meta(self, fqns: list[str] | None = None) -> None:
        """FSDP2's refusal to gather meta shards, naming them (``fqns``: from the root)."""
        still = [n for n, p in zip(fqns or self.names, self.padded) if p.is_meta]
        if still:
            raise RuntimeError(
                "FSDP parameters should be materialized from meta device before training, "
                f"but the following were still on meta device: {still}. Hint: "
                "model.to_empty(device=...) and initialise the parameters "
                "(model.reset_parameters() or a state dict) after fully_shard, before the "
                "first forward or unshard()"
            )

    def gather_full(self, dtype: torch.dtype | None) -> list[torch.Tensor]:
        """All-gather: the full parameters (a TP parameter: its local tensor), floating point
        ones in ``dtype``. One buffer; as bytes when the dtypes differ (FSDP2 does too)."""
        if not self.shapes:  # no parameters (all in inner units): no collective, as FSDP2
            return []
        self.check_not_meta()
        dtypes = self.gather_dtypes(dtype)
        mixed = len(set(dtypes)) > 1
        pieces = [p.to(d).reshape(-1) for p, d in zip(self.padded, dtypes)]
        if mixed:
            pieces = [x.view(torch.uint8) for x in pieces]
        total = sum(x.numel() for x in pieces)  # T (elements, or bytes when mixed)
        buffer_dtype = torch.uint8 if mixed else dtypes[0]
        rows = torch.empty(self.world, total, dtype=buffer_dtype, device=self.device)
        torch.cat(pieces, out=rows[self.rank])  # this rank's row: its padded shards
        collectives.gather_into(rows, rows[self.rank], self.group)
        fulls, offset = [], 0
        for x, d, lay in zip(pieces, dtypes, self.layouts):  # (world, T) -> dim-0 row forms
            block = rows[:, offset : offset + x.numel()]
            offset += x.numel()
            block = block.contiguous().view(d) if mixed else block
            view = shard.uncat(block, [lay.row_shape], self.world)[0]
            fulls.append(shard.from_rows(view, self.world, lay.dim))
        return fulls

    def gather(self) -> None:
        """All-gather into the ``full`` parameters' storages (allocating them again)."""
        if self.post_kept is not None:  # resharded to k ranks: gather within them only
            fulls = post_forward.gather(self.post_kept, self.shapes, self.post_group)
            self.post_kept = None
        else:
            fulls = self.gather_full(self.param_dtype)
        if not self.full:
            dtypes = self.gather_dtypes(self.param_dtype)
            self.full_local = [
                torch.empty(s, dtype=d, device=self.device) for s, d in zip(self.shapes, dtypes)
            ]
            self.full = [
                nn.Parameter(lay.unsharded(t), rg)
                for t, lay, rg in zip(self.full_local, self.layouts, self.requires_grad)
            ]
        with torch.no_grad():
            for p, data in zip(self.full_local, fulls):
                p.untyped_storage().resize_(p.numel() * p.element_size())
                p.data.copy_(data)  # .data: a fresh version counter, saved tensors stay valid

    def shard_of(self, i: int, full: torch.Tensor) -> torch.Tensor:
        """This rank's real rows of ``full`` (parameter i, whole): what its shard holds."""
        rows = shard.to_rows(full, self.world, self.layouts[i].dim)
        start = min(self.rank * self.padded[i].shape[0], rows.shape[0])
        return rows[start : start + self.length(i)]
