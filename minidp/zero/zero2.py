"""ZeRO-2: gradients reduce-scattered during backward; each rank keeps and steps only its shard.

Use it *instead of* DDP (it does the gradient reduction itself)::

    opt = minidp.zero.Zero2Optimizer(net.parameters(), torch.optim.AdamW, lr=1e-3)
    loss_fn(net(x), y).backward()   # buckets reduce-scattered as their gradients are ready
    opt.step()                      # step my rows of every parameter, then all-gather them

Each of ``W`` ranks holds the whole parameters but ``1/W`` of the gradients and optimizer
state. Parameters are cut on dim 0 (``fsdp/shard.py``: FSDP2's rule). A post-accumulate-grad
hook writes each gradient, divided by ``W`` as in DDP, into its bucket's send buffer (rank
by rank, padded to ``ceil(rows/W)`` rows) and frees ``.grad``; a complete bucket is
reduce-scattered on DDP's communication thread (``comm/launch_queue.py``) while autograd
goes on. The local optimizer steps leaf *views* of this rank's rows; one all-gather per
bucket fills in the others' rows. Volume: DDP's all-reduce.

As FSDP2: a second backward before ``zero_grad`` accumulates; ``no_sync()``
(``set_requires_gradient_sync(False)``) keeps full local gradients; a freed ``.grad`` is a
``Shard(0)`` DTensor of this rank's reduced rows (``None`` in a thread world and for 0-d
parameters): ``clip_grad_norm_`` gets the global norm, ``torch.save`` and ``deepcopy`` work,
``p.grad.add_(p)`` is refused as DTensor refuses it. Checkpoints: ``state.py``; any shape:
``zero2_layout.py``. Refused (``zero2_checks.py``, ``zero2_hooks.py``): a step that is not
element-wise (Adafactor, LARS), a second optimizer on the same parameters, DDP around the
model, a step after only ``no_sync()`` backwards, a parameter unfrozen after construction.

Against torch: ``ZeroRedundancyOptimizer`` + DDP, and FSDP2 with reshard_after_forward=False
(torch >= 2.8): ``torch.equal`` at 2 ranks, a few ulps at 3 and 4 (another summation order
than gloo's). The book's ``minidp/textbook/zero.py`` leaves out buckets and the overlap with
backward. Run: ``python lessons/20_zero2.py``; test: ``pytest tests/test_zero2*.py``
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

from minidp.comm import broadcast, reduce_scatter_tensor
from minidp.comm import group as groups
from minidp.comm.collectives import all_gather_into_tensor
from minidp.comm.launch_queue import CommThread, LaunchQueue
from minidp.ddp.buckets import MB, compute_bucket_assignment_by_size
from minidp.fsdp import dtensor
from minidp.zero import checks, state, zero2_checks, zero2_hooks
from minidp.zero.state import consolidate, copy_options
from minidp.zero.zero2_layout import Bucket

WHO = "Zero2Optimizer"


class Zero2Optimizer(torch.optim.Optimizer):
    """ZeRO-2: sharded gradients and optimizer state, bucketed reduce-scatter in backward.

    A ``torch.optim.Optimizer``: an LR scheduler edits ``param_groups``; ``step`` passes it on.

    Args:
        params: parameters or parameter groups, the same on every rank (frozen: skipped).
        optimizer_class: an element-wise optimizer class, e.g. ``torch.optim.AdamW``.
        process_group: the data-parallel group; ``None``: the current/default group.
        bucket_cap_mb: bucket size cap in MiB (default 25, like DDP).
        **defaults: the optimizer's options (``lr=...``).

    Attributes:
        optim: the local optimizer, over this rank's rows of every trainable parameter.
    """

    def __init__(
        self,
        params: Iterable,
        optimizer_class: type,
        *,
        process_group=None,
        bucket_cap_mb: float = 25,
        **defaults: Any,
    ) -> None:
        checks.check_optimizer_class(WHO, optimizer_class)
        zero2_checks.check_elementwise(WHO, optimizer_class)
        params = list(params)
        if not params:
            raise ValueError(f"{WHO}: expected at least one parameter, got an empty list")
        super().__init__(params, defaults)
        all_params = [p for g in self.param_groups for p in g["params"]]
        checks.check_dense(WHO, all_params)
        self.params = [p for p in all_params if p.requires_grad]
        zero2_hooks.check_unclaimed(WHO, self.params)  # before any collective
        self.process_group = g = groups.resolve(process_group)
        self.rank, self.world_size = g.rank(), g.size()
        self.mesh = dtensor.torch_mesh(None, g, None, self.params)  # None: a thread world
        checks.verify_same_parameters(WHO, g, self.param_groups)
        with torch.no_grad():
            for p in all_params:  # every replica starts from rank 0's weights, like DDP
                if p.numel():
                    broadcast(p.detach(), group=g, group_src=0)
        order = self.params[::-1]  # gradients arrive roughly last layer first
        assignment, _ = compute_bucket_assignment_by_size(order, [int(bucket_cap_mb * MB)])
        dtype = all_params[0].dtype
        self.buckets = [
            Bucket([order[i] for i in b], self.world_size, self.rank, dtype) for b in assignment
        ]
        self._where = {id(piece.param): (b, piece) for b in self.buckets for piece in b.pieces}
        self._index = {id(b): i for i, b in enumerate(self.buckets)}
        # buckets go in index order, as DDP's; armed from a backward's first gradient to its end
        self.queue = LaunchQueue(
            CommThread(g),
            counts=self._counts,
            launch=self._launch,
            finish=self._finish,
            in_order=True,
        )
        self._sync = True  # False inside no_sync(): gradients stay full and local
        self._local: set[int] = set()  # parameters whose .grad is a kept local gradient
        # held weakly: dropping the optimizer frees it, its hooks and its claim
        self.queue.hook(self.params, self._on_grad)
        zero2_hooks.attach(self, self.queue, self.params)
        local_groups = []  # one local group per group: this rank's rows of its trainable ones
        for pg in self.param_groups:
            entry = {k: v for k, v in pg.items() if k != "params"}
            entry["params"] = [self._where[id(p)][1].shard for p in pg["params"] if p.requires_grad]
            local_groups.append(entry)
        self.optim = optimizer_class(local_groups, **defaults)
        copy_options(self.optim.param_groups, self.param_groups)  # the class's own defaults

    def __repr__(self) -> str:
        n = sum(len(b.pieces) for b in self.buckets)
        return (
            f"{WHO}(at {id(self):#x}, {type(self.optim).__name__}, {n} trainable parameters, "
            f"{len(self.buckets)} buckets, rank {self.rank} of {self.world_size})"
        )

    def add_param_group(self, param_group: dict) -> None:
        if hasattr(self, "buckets"):  # after construction: hooks and buckets are fixed
            raise RuntimeError(
                f"{WHO}: expected every parameter group at construction, got "
                f"add_param_group(...) with {len(list(param_group.get('params', [])))} "
                "parameters afterwards; they would get no gradient hooks and never train. "
                f"Hint: pass all groups to the constructor (remove_hooks() and build a new {WHO})"
            )
        super().add_param_group(param_group)

    # -- backward -------------------------------------------------------------------------
    def _on_grad(self, k: int) -> None:
        p = self.params[k]
        if p.grad.layout != torch.strided:
            checks.check_dense_grads(WHO, [p])
        if not self._sync:  # inside no_sync(): the full gradient stays; autograd adds the next
            self._local.add(id(p))
            return
        self._local.discard(id(p))
        bucket, piece = self._where[id(p)]
        zero2_checks.check_first_gradient(WHO, bucket, p)
        if bucket.send is None:
            bucket.send = torch.zeros(
                self.world_size * bucket.segment, dtype=bucket.shard_grad.dtype
            )
        flat = p.grad.detach().reshape(-1)  # row-major (a view where p.grad is contiguous)
        for r in range(self.world_size):  # DDP's pre-division, written straight into place
            rows = piece.rank_rows(flat, r)
            at = r * bucket.segment + piece.offset
            torch.div(rows, self.world_size, out=bucket.send[at : at + rows.numel()])
        # the full gradient is gone: only the shard survives, as FSDP2's: a DTensor over it
        # (clip_grad_norm_ on the model's parameters then gets the global norm)
        mesh = self.mesh if p.dim() else None  # a 0-d tensor has no dim 0 to shard
        p.grad = (
            dtensor.as_sharded(_at_offset_zero(bucket.grad_rows(piece)), mesh, p.shape)
            if mesh
            else None
        )
        bucket.seen.add(id(p))
        self.queue.ready(self._index[id(bucket)])  # the first arms, the last finishes

    def _counts(self) -> list[int]:
        return [sum(pc.param.requires_grad for pc in b.pieces) for b in self.buckets]

    def _launch(self, i: int):
        """Bucket ``i`` is complete (and every earlier one has gone): its reduce-scatter,
        for the communication thread, into a fresh buffer when it must be added."""
        bucket, s = self.buckets[i], self.buckets[i].segment
        if not bucket.seen or not s:  # all frozen now, or zero-element: nothing to send
            return None
        send = (
            bucket.send
        )  # (world * s,): the hooks refill it next backward: the ring may work in it
        out = torch.empty_like(bucket.shard_grad) if bucket.accumulate else bucket.shard_grad
        return lambda: reduce_scatter_tensor(
            out, send, "sum", self.process_group, input_is_scratch=True
        )

    def _finish(self) -> None:
        """Wait for every launched reduce-scatter; add what a second backward reduced. (A
        bucket that never went keeps its gradients in flight: ``step`` names it.)"""
        results = self.queue.wait()
        for bucket, future, out in zip(self.buckets, self.queue.futures, results):
            if future is None:
                continue
            if bucket.accumulate and out is not None:
                bucket.shard_grad += out  # a second backward before zero_grad: add, like torch
            bucket.reset_inflight()
            bucket.reduced = bucket.accumulate = True

    # -- step -----------------------------------------------------------------------------
    @torch.no_grad()
    def step(self, closure: Callable | None = None) -> Any:
        """Step this rank's rows of every parameter, then all-gather every bucket
        (``closure``, which re-evaluates the loss, runs once before)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self.queue.armed:  # a backward that did not reach every bucket: what went, lands
            self.queue.close()
        zero2_checks.check_ready(self, WHO)
        zero2_checks.check_storage(self, WHO)
        for b in self.buckets:
            for piece in b.pieces:  # a parameter frozen since construction: skipped, like torch
                piece.shard.grad = b.grad_rows(piece) if piece.param.requires_grad else None
        copy_options(self.param_groups, self.optim.param_groups)  # e.g. an LR scheduler's lr
        self.optim.step()
        copy_options(self.optim.param_groups, self.param_groups)
        for b in self.buckets:
            self._gather(b)
            b.reduced = False
        return loss

    def _gather(self, bucket: Bucket) -> None:
        s = bucket.segment
        if not s:
            return
        # (world * segment,) rank-local: my segment filled here (padding zeroed), then gathered
        gathered = torch.empty(self.world_size * s, dtype=bucket.shard_grad.dtype)
        mine = gathered[self.rank * s : (self.rank + 1) * s].zero_()
        for piece in bucket.pieces:
            mine[piece.offset : piece.offset + piece.shard.numel()] = piece.shard.reshape(-1)
        all_gather_into_tensor(gathered, mine, self.process_group)
        for piece in bucket.pieces:
            for r in range(self.world_size):
                if r != self.rank:
                    piece.write_rows(gathered[r * s + piece.offset : (r + 1) * s], r)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Forget the gradient shards: the next backward overwrites instead of adding."""
        if self.queue.armed:  # a half-done backward: let what went finish, then drop it all
            self.queue.close()
        for p in self.params:
            if set_to_none or not isinstance(p.grad, dtensor.DTensor):
                p.grad = None  # a full gradient kept by no_sync() too
        self._local.clear()
        for b in self.buckets:
            b.reset_inflight()  # a half-done backward (it raised at step) is dropped too
            b.accumulate = b.reduced = False
            if not set_to_none:
                b.shard_grad.zero_()
        for piece in (piece for b in self.buckets for piece in b.pieces):
            piece.shard.grad = None

    def set_requires_gradient_sync(self, requires_gradient_sync: bool) -> None:
        """FSDP2's name: ``False`` keeps each backward's full gradient locally (autograd adds
        them up); the next backward with ``True`` reduce-scatters the sum."""
        self._sync = bool(requires_gradient_sync)

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """DDP's name: backwards inside accumulate full local gradients, reduced by the next
        backward outside — one reduce-scatter per accumulated step, not one per micro-batch."""
        before, self._sync = self._sync, False
        try:
            yield
        finally:
            self._sync = before

    def gradient_shards(self) -> list[torch.Tensor]:
        """This rank's summed gradient rows, one flat buffer per bucket (padding included)."""
        return [b.shard_grad for b in self.buckets]

    def remove_hooks(self) -> None:
        """Detach from the parameters: no more reduce-scatters; another optimizer may hook them."""
        zero2_hooks.detach(self, self.queue, self.params)

    # -- checkpoints (state.py) ----------------------------------------------------
    def consolidate_state_dict(self, to: int = 0) -> None:
        """Collect every rank's rows of the optimizer state on rank ``to`` (call on every rank)."""
        consolidate(self, to)

    def state_dict(self) -> dict:
        """The whole state in torch's format (after ``consolidate_state_dict``), any world size."""
        return state.full_state(self, WHO)

    def load_state_dict(self, state_dict: dict) -> None:
        """Load a ``state_dict()`` saved at any world size; each rank keeps its own rows."""
        state.load(self, state_dict, WHO)


def _at_offset_zero(rows: torch.Tensor) -> torch.Tensor:
    """``rows`` (a view into a bucket) as a tensor over the same memory that starts at storage
    offset 0. A DTensor takes its local tensor's storage offset as its own, and torch.save
    and copy.deepcopy then read a storage the DTensor does not have ("invalid python
    storage": FSDP2's own gradients after the first of a reduce-scatter fail so on torch
    2.13). DLPack hands over the same memory from its first element: no copy."""
    return torch.from_dlpack(rows) if rows.storage_offset() else rows
