"""The reducer: gradient-ready hooks fill buckets, full buckets are all-reduced during backward.

    forward                 prepare_for_backward(): the queue armed, every bucket pending
    backward, per param     hook: copy grad * (1/world_size) into the bucket's slot
                            bucket full -> launch it (in index order) on the comm thread
    last bucket launched    _finish: wait for every bucket, write results into .grad

The hooks, the counting and the in-order launches are ``comm/launch_queue.py``'s; this
file says what a bucket sends and what its result becomes.

As in torch: scaling while copying is free and gives torch's bits (``sum(g * (1/n))`` is
not ``sum(g) / n``); buckets launch in index order, as ranks may see gradients ready in
other orders; one rebuild after the first iteration, in rank 0's ready order. The book's
reducer (no rebuild, no unused parameters): ``minidp/textbook/ddp.py``.

Test: ``pytest tests/test_ddp.py``; watch it: ``python -m minidp demo ddp``
"""

from __future__ import annotations

import torch

from minidp import trace
from minidp.comm import all_reduce
from minidp.comm.launch_queue import CommThread, LaunchQueue
from minidp.ddp import buckets as bk
from minidp.ddp.checks import unfinished_reduction_message
from minidp.ddp.hooks import GradBucket
from minidp.ddp.unused import unused_parameters


class Reducer:
    """Owns the buckets, the per-parameter hooks and the communication thread of one DDP."""

    def __init__(self, params, names, group, caps, find_unused, as_view, algorithm, overlap):
        self.params = params  # trainable parameters, DDP order (tied ones once)
        self.names = names
        self.group = group
        self.world_size = group.size()
        self.div_factor = self.world_size  # what gradients are divided by (join may change it)
        self.caps = caps
        self.find_unused = find_unused
        self.gradient_as_bucket_view = as_view
        self.algorithm = algorithm
        self.overlap = overlap
        self.comm_hook = None
        self.comm_state = None
        self.comm = CommThread(group)
        # buckets go strictly in index order; the queue is armed by a synchronized forward
        self.queue = LaunchQueue(
            self.comm, counts=self._counts, launch=self._launch, finish=self._finish, in_order=True
        )
        first, _ = bk.compute_bucket_assignment_by_size(params, caps.initial_limits(find_unused))
        self.assignment = list(reversed(first))  # backward makes the last layers' grads first
        self.buckets: list[bk.Bucket] = []
        self.locator: list[tuple[int, int]] = []
        self.has_rebuilt = False
        self.ready_order: list[int] = []  # param indices in gradient-ready order (iter 1)
        self.last_ready_order: list[int] = []  # the same for the last backward (logged)
        self.logger = None  # the DDP's Logger: stamps this iteration's events
        self.require_finalize = False  # some gradient was marked, _finish not reached yet
        self.ready: set[int] = set()
        self.unused: list[int] = []
        self.marked_unused = True
        self.local_used = torch.zeros(len(params), dtype=torch.int32)  # (n_params,) rank-local
        self.used_future = None

    def install(self) -> None:
        """Allocate the buckets and register one post-accumulate-grad hook per parameter."""
        self._set_buckets(self.assignment)
        self.queue.hook(self.params, self._on_grad_ready)  # held weakly: a dropped DDP goes

    def _set_buckets(self, assignment: list[list[int]]) -> None:
        self.assignment = assignment
        self.buckets, self.locator = bk.build_buckets(assignment, self.params)
        if self.gradient_as_bucket_view:  # .grad moves into the bucket and becomes the view
            with torch.no_grad():
                for bucket in self.buckets:
                    for p, view in zip(bucket.params, bucket.views):
                        if p.grad is not None and not _aliases(p.grad, bucket.buffer):
                            view.copy_(p.grad)
                            p.grad = view

    def bucket_bytes(self) -> list[int]:
        """Each bucket's size in bytes, in launch order."""
        return [
            sum(self.params[i].numel() * self.params[i].element_size() for i in b)
            for b in self.assignment
        ]

    # ---- forward side ---------------------------------------------------------------

    def prepare_for_forward(self) -> None:
        """At every grad-enabled forward: check the last backward finished; rebuild once."""
        if self.require_finalize:
            missing = [i for i in range(len(self.params)) if i not in self.ready]
            raise self.logger.error(
                RuntimeError,
                unfinished_reduction_message(
                    self.group.rank(), missing, self.names, self.find_unused
                ),
            )
        if not self.find_unused and not self.has_rebuilt and self.ready_order:
            self._rebuild()

    def prepare_for_backward(self, output) -> None:
        """Arm the hooks for the coming backward (a synchronized forward just ran)."""
        self.ready.clear()
        self.last_ready_order = []
        self.logger.stamp("backward_compute_start")
        self.used_future = None
        self.queue.arm(hold=not self.overlap)
        if trace.active:  # which grads go into which bucket
            layout = [
                {"bucket": b.index, "bytes": b.nbytes, "params": [self.names[i] for i in b.indices]}
                for b in self.buckets
            ]
            trace.instant("ddp buckets", lane="backward", buckets=layout)
        self.marked_unused = False
        if self.find_unused:
            self.unused = unused_parameters(output, self.params)

    def _rebuild(self) -> None:
        order = self.ready_order
        if len(order) != len(self.params):
            raise RuntimeError(
                f"DDP internal error: recorded {len(order)} ready gradients for "
                f"{len(self.params)} parameters"
            )
        tensors = [self.params[i] for i in order]
        assignment, _ = bk.compute_bucket_assignment_by_size(  # ready order: not reversed
            tensors, self.caps.rebuild_limits(), tensor_indices=order
        )
        self._set_buckets(bk.rank0_assignment(assignment, len(self.params), self.group))
        self.has_rebuilt = True
        self.ready_order = []

    # ---- backward side: hooks -------------------------------------------------------

    def _on_grad_ready(self, index: int) -> None:
        param = self.params[index]
        if self.find_unused and param.grad is not None:
            self.local_used[index] = 1  # counts inside no_sync too: used is used
        if not self.queue.armed:
            return  # a backward DDP did not arm: no_sync, or a second backward
        if trace.active:
            trace.instant("grad ready", lane="backward", param=self.names[index], index=index)
        if not self.marked_unused:
            self.marked_unused = True
            for i in self.unused:  # never getting a hook: ready now, with a zero slot
                self._mark_ready(i)
        self._mark_ready(index)

    def _mark_ready(self, index: int) -> None:
        if index in self.ready:
            raise RuntimeError(
                f"DDP: parameter {index} ({self.names[index]}) got its gradient twice in one "
                "iteration — expected one gradient per parameter per backward. Hint: run "
                "backward once per forward (or sum the losses first), and do not reuse a "
                "parameter across reentrant checkpoints"
            )
        if not self.find_unused and not self.has_rebuilt:
            self.ready_order.append(index)
        self.last_ready_order.append(index)
        self.ready.add(index)
        self.require_finalize = True
        b, pos = self.locator[index]
        self._copy_in(self.buckets[b], pos)
        self.queue.ready(b)  # the last bucket launched: _finish

    def _copy_in(self, bucket: bk.Bucket, pos: int) -> None:
        param, view = bucket.params[pos], bucket.views[pos]
        grad = param.grad
        with torch.no_grad():
            if grad is None:
                view.zero_()  # unused here: contribute zeros, other ranks may have values
            elif not _aliases(grad, bucket.buffer):
                if self.comm_hook is None:
                    torch.mul(grad, 1.0 / self.div_factor, out=view)  # scale while copying
                else:
                    view.copy_(grad)  # a hook averages by itself
                if self.gradient_as_bucket_view:
                    param.grad = view
            elif self.comm_hook is None:
                # .grad already IS the slot (gradient_as_bucket_view, grads not set to
                # None): nothing to copy, so torch divides in place — x/n, not x*(1/n).
                view.div_(self.div_factor)

    def _counts(self) -> list[int]:
        return [len(b.params) for b in self.buckets]

    def _launch(self, b: int):
        """Bucket ``b`` goes (in index order, see ``LaunchQueue``): its all-reduce."""
        bucket = self.buckets[b]
        self.logger.stamp("backward_comm_start", first_only=True)
        if trace.active:
            trace.instant("bucket launch", lane="comm", bucket=b, bytes=bucket.nbytes)
        return lambda: self._reduce(bucket)

    # ---- the communication thread ---------------------------------------------------

    def _reduce(self, bucket: bk.Bucket, buffer: torch.Tensor | None = None) -> torch.Tensor:
        """All-reduce ``bucket`` (or ``buffer``: zeros when a joined rank shadows it)."""
        buffer = bucket.buffer if buffer is None else buffer
        with trace.span(f"all-reduce bucket {bucket.index}", lane="comm", bytes=bucket.nbytes):
            if self.comm_hook is None:
                result = all_reduce(buffer, "sum", self.group, self.algorithm)
            else:
                grad_bucket = GradBucket(bucket.index, len(self.buckets), buffer, bucket)
                result = self.comm_hook(self.comm_state, grad_bucket).wait()
        if trace.active:
            trace.instant("bucket finish", lane="comm", bucket=bucket.index)
        if not isinstance(result, torch.Tensor) or result.numel() != buffer.numel():
            got = (
                f"a tensor of {result.numel()} elements"
                if torch.is_tensor(result)
                else repr(result)
            )
            raise TypeError(
                f"DDP comm hook {getattr(self.comm_hook, '__name__', self.comm_hook)}: its "
                f"Future must hold one tensor of {buffer.numel()} elements (the "
                f"bucket's buffer), got {got}. Hint: return fut.then(lambda f: buffer)"
            )
        return result

    def _reduce_used(self, used: torch.Tensor) -> torch.Tensor:
        return all_reduce(used, "sum", self.group, self.algorithm)  # (n_params,) int32

    def _finish(self) -> None:
        """Every bucket went (the queue, once per backward): wait, write the results back."""
        self.logger.stamp("backward_compute_end")
        if self.find_unused:  # which parameters did any rank use? (the rest keep .grad)
            self.used_future = self.comm.submit(self._reduce_used, self.local_used.clone())
        self.require_finalize = False
        self.div_factor = self.world_size
        with trace.span("wait for buckets", lane="backward"):
            results = self.queue.wait()  # re-raises comm-thread errors
            used = self.used_future.result() if self.used_future is not None else None
        self.logger.stamp("backward_comm_end")
        with torch.no_grad():
            for bucket, result in zip(self.buckets, results):
                self._write_back(bucket, bucket.views_of(result), used)
        if self.find_unused:
            self.local_used.zero_()

    def shadow_backward(self) -> None:
        """Run this iteration's collectives with zeros (a joined rank, see ``join.py``)."""
        futures = [
            self.comm.submit(self._reduce, b, torch.zeros_like(b.buffer)) for b in self.buckets
        ]
        if self.find_unused:
            futures.append(self.comm.submit(self._reduce_used, self.local_used.clone()))
        for f in futures:
            f.result()
        if not self.find_unused and not self.has_rebuilt and not self.ready_order:
            self.ready_order = list(range(len(self.params)))  # torch's stand-in order

    def _write_back(self, bucket: bk.Bucket, views_out: list, used) -> None:
        for pos, (param, index) in enumerate(zip(bucket.params, bucket.indices)):
            globally_unused = used is not None and int(used[index]) == 0
            if self.gradient_as_bucket_view:
                view_in = bucket.views[pos]
                if views_out[pos] is not view_in:  # a hook returned a new tensor
                    view_in.copy_(views_out[pos])
                if not globally_unused and param.grad is None:
                    param.grad = view_in
            elif not globally_unused:  # nobody used it: .grad stays as it was (None)
                if param.grad is None:
                    param.grad = torch.empty_like(param).copy_(views_out[pos])
                else:
                    param.grad.copy_(views_out[pos])


def _aliases(a: torch.Tensor, b: torch.Tensor) -> bool:
    """True if ``a`` and ``b`` share storage (torch's ``is_alias_of``)."""
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
