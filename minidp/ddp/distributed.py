"""``DistributedDataParallel``: one model replica per rank, gradients averaged during backward.

Use it like torch's::

    model = minidp.DistributedDataParallel(net)        # inside each rank's process
    loss_fn(model(x), y).backward()                     # gradients are averaged here
    optimizer.step()

What the wrapper itself does (the reducer does the rest, see ``reducer.py``):

* construction: check the module; check across ranks that every rank has the same
  parameters (name the rank and the parameter otherwise); broadcast parameters and
  buffers from rank 0, so every replica starts identical; build buckets and hooks;
* every forward: broadcast buffers from rank 0 (BatchNorm statistics), then run the
  module, then arm the reducer for the backward that follows.

Its parameters after each step are bit-identical to ``torch.nn.parallel.
DistributedDataParallel`` on gloo (same buckets, same scaling, same summation order).

Test: ``pytest tests/test_ddp.py``; watch: ``python -m minidp demo ddp``
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch

from minidp import trace
from minidp.comm import broadcast
from minidp.comm import group as groups
from minidp.ddp import checks
from minidp.ddp.buckets import BucketCaps, bucket_of_params
from minidp.ddp.join import Join
from minidp.ddp.reducer import Reducer

ALGORITHMS = ("auto", "ring", "naive")


class DistributedDataParallel(torch.nn.Module):
    """Data parallelism across processes: same model everywhere, averaged gradients.

    Args:
        module: the model replica on this rank (same architecture on every rank).
        process_group: group to synchronize over; ``None``: the current/default group.
        bucket_cap_mb: bucket size cap in MiB (default 25, with a 1 MiB first bucket).
        broadcast_buffers: broadcast buffers from rank 0 at construction and before each
            forward (skipped right after a forward under ``no_grad``/``no_sync``).
        find_unused_parameters: walk the autograd graph after each forward and mark
            parameters it does not reach as ready (needed when some go unused).
        gradient_as_bucket_view: make ``.grad`` a view into the bucket (saves one copy and
            the memory of one gradient set).
        algorithm: "auto" (default: buckets up to 256 KiB in one exchange, bigger ones round
            the ring; both bit-exact with gloo, see ``minidp.comm.all_reduce``), "ring"
            (always the ring) or "naive" (parameter server, to compare).
        overlap: ``False`` launches no all-reduce before backward has finished — the
            baseline that shows what overlapping communication with backward buys.

    Raises:
        RuntimeError, ValueError: for modules it cannot wrap, and (on every rank) when the
            ranks' models or bucket layouts differ. See ``checks.py``.
    """

    def __init__(
        self,
        module: torch.nn.Module,
        process_group=None,
        bucket_cap_mb: float | None = None,
        broadcast_buffers: bool = True,
        find_unused_parameters: bool = False,
        gradient_as_bucket_view: bool = False,
        algorithm: str = "auto",
        overlap: bool = True,
    ) -> None:
        super().__init__()
        checks.check_module(
            module, (DistributedDataParallel, torch.nn.parallel.DistributedDataParallel)
        )
        if algorithm not in ALGORITHMS:
            raise ValueError(
                f"DistributedDataParallel: algorithm must be one of {ALGORITHMS}, got {algorithm!r}"
            )
        caps = BucketCaps.from_mb(bucket_cap_mb)
        self.module = module
        self.process_group = groups.resolve(process_group)
        if not groups.is_member(self.process_group):
            raise ValueError(
                "DistributedDataParallel: this rank is not in process_group (dist.new_group "
                "returned its placeholder here) — expected a group this rank belongs to. "
                "Hint: wrap the model only on the group's ranks"
            )
        self.broadcast_buffers = broadcast_buffers
        self.find_unused_parameters = find_unused_parameters
        self.gradient_as_bucket_view = gradient_as_bucket_view
        self.bucket_bytes_cap = caps.cap
        self.require_backward_grad_sync = True  # False inside no_sync()
        self.require_forward_param_sync = True  # did the last forward arm a sync?
        params, names = checks.trainable_parameters(module)
        self.reducer = Reducer(
            params,
            names,
            self.process_group,
            caps,
            find_unused_parameters,
            gradient_as_bucket_view,
            algorithm,
            overlap,
        )
        bucket_of = bucket_of_params(self.reducer.assignment, len(params))
        buffers = list(module.named_buffers()) if broadcast_buffers else None
        options = {
            "find_unused_parameters": find_unused_parameters,
            "broadcast_buffers": broadcast_buffers,
        }
        checks.verify_same_model(self.process_group, params, names, bucket_of, buffers, options)
        # Every replica starts from rank 0's weights: all parameters, frozen ones too.
        states = [p.detach() for p in module.parameters()]
        if broadcast_buffers:
            states += [b.detach() for b in module.buffers()]
        self._broadcast_coalesced(states)
        self.reducer.install()
        self._comm_hook_set = False
        self._join: Join | None = None  # set while inside ``with self.join():``
        checks.mark_wrapped(module, self)

    def forward(self, *inputs, **kwargs):
        grad_enabled = torch.is_grad_enabled()
        join = self._join
        if join is not None:
            join.notify()  # "still training" (ranks that ran out of data shadow us)
        if grad_enabled:
            self.reducer.prepare_for_forward()  # raises if the last backward never finished
        if self.require_forward_param_sync and self.broadcast_buffers and self._buffers_list():
            # Under join, rank 0 may have stopped training: take the highest active rank's.
            self._sync_buffers(join.common_rank(True) if join is not None else 0)
        if join is not None:
            join.announce_sync(self.require_backward_grad_sync)
        with trace.span("forward", lane="compute"):
            output = self.module(*inputs, **kwargs)
        # The FORWARD decides whether the next backward synchronizes: that is why, with
        # no_sync(), the forward must run inside the context too. A forward outside arms
        # the hooks, and the backward then all-reduces even if it runs inside.
        if grad_enabled and self.require_backward_grad_sync:
            self.require_forward_param_sync = True
            self.reducer.prepare_for_backward(output)
        else:
            self.require_forward_param_sync = False
        return output

    def join(
        self,
        divide_by_initial_world_size: bool = True,
        enable: bool = True,
        throw_on_early_termination: bool = False,
    ) -> Join:
        """Context manager for uneven inputs across ranks (see ``minidp.ddp.join``)."""
        return Join(self, divide_by_initial_world_size, enable, throw_on_early_termination)

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Accumulate gradients locally (no communication) for forwards run inside.

        The first synchronized backward afterwards reduces the accumulated sum. Put the
        forward inside the block too (see ``forward``).
        """
        previous = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = previous

    def register_comm_hook(self, state: object, hook: Callable) -> None:
        """Reduce each bucket with ``hook(state, bucket) -> Future[Tensor]`` (once only).

        See ``minidp.ddp.hooks`` for the bucket API and the built-in hooks.
        """
        if not callable(hook):
            raise TypeError(f"register_comm_hook: hook must be callable, got {hook!r}")
        if self._comm_hook_set:
            raise RuntimeError(
                "register_comm_hook: a communication hook is already registered — expected "
                "at most one per DDP. Hint: combine them into one hook"
            )
        if self.reducer.expect_hooks and self.reducer.ready:
            raise RuntimeError("register_comm_hook: cannot change the hook during a backward")
        self._comm_hook_set = True
        self.reducer.comm_hook, self.reducer.comm_state = hook, state

    # ---- buffers ---------------------------------------------------------------------

    def _buffers_list(self) -> list[torch.Tensor]:
        # Re-read the buffers each time: a module may reassign them (self.x = tensor).
        return list(self.module.buffers())

    def _sync_buffers(self, src: int = 0) -> None:
        self._broadcast_coalesced([b.detach() for b in self._buffers_list()], src)

    def _broadcast_coalesced(self, tensors: list[torch.Tensor], src: int = 0) -> None:
        """Broadcast from ``src``, one flat message per dtype instead of one per tensor."""
        if self.process_group.size() == 1:
            return
        by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
        for t in tensors:
            by_dtype.setdefault(t.dtype, []).append(t)
        rank = self.process_group.rank()
        with torch.no_grad():
            for group in by_dtype.values():
                flat = torch.cat([t.reshape(-1) for t in group])  # (sum numel,) rank-local
                broadcast(flat, group=self.process_group, group_src=src)
                if rank == src:
                    continue  # the source already holds these values
                offset = 0
                for t in group:
                    t.copy_(flat[offset : offset + t.numel()].view(t.shape))
                    offset += t.numel()
