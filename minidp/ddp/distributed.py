"""``DistributedDataParallel``: one model replica per rank, gradients averaged during backward.

    model = minidp.DistributedDataParallel(net.to(local_rank), device_ids=[local_rank])
    loss_fn(model(x), y).backward()                     # gradients are averaged here

Construction checks that the ranks' models match (``checks.py``) and broadcasts rank 0's
state; each forward broadcasts buffers and arms the reducer (``reducer.py``); ``Join``
works (``join.py``); ``torch.save(model)`` and ``copy.deepcopy`` work as on torch's (over
the default group, ``pickling.py``); ``_get_ddp_logging_data()`` reports as torch's (``logger.py``);
``torch.compile(model)`` compiles the module and leaves the bookkeeping eager. Parameters
match torch's DDP on gloo bit for bit. The book's DDP in one screen:
``minidp/textbook/ddp.py``.

Test: ``pytest tests/test_ddp.py tests/test_ddp_save.py``; watch: ``python -m minidp demo ddp``
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
from torch.distributed.algorithms.join import Join, Joinable, JoinHook

from minidp import trace
from minidp.comm import group as groups
from minidp.ddp import arguments, checks, hooks, pickling
from minidp.ddp.buckets import BucketCaps, broadcast_coalesced, bucket_of_params
from minidp.ddp.join import DDPJoinHook, announce_sync, common_rank
from minidp.ddp.logger import Logger
from minidp.ddp.reducer import Reducer

ALGORITHMS = ("auto", "ring", "naive")


class DistributedDataParallel(torch.nn.Module, Joinable):
    """Data parallelism across processes: same model everywhere, averaged gradients.

    torch's arguments in torch's order (2.13-2.15), read by ``arguments.py``: e.g.
    ``bucket_cap_mb`` (25 MiB, first bucket 1 MiB), ``find_unused_parameters``
    (``unused.py``), ``gradient_as_bucket_view`` (``.grad`` views the bucket: one copy less).
    minidp's own, keyword-only: ``algorithm`` "auto" (one exchange up to 1 MiB at 2 ranks,
    256 KiB from 3, else the ring; both bit-exact with gloo), "ring" or "naive" (parameter
    server, to compare), and
    ``overlap=False`` (no all-reduce before backward ends: the baseline).

    Raises RuntimeError or ValueError, on every rank, for modules it cannot wrap, arguments
    torch refuses, and ranks whose models or bucket layouts differ (``checks.py``).
    """

    def __init__(
        self,
        module: torch.nn.Module,
        device_ids: list | None = None,
        output_device=None,
        dim: int = 0,
        broadcast_buffers: bool | None = None,
        init_sync: bool = True,
        process_group=None,
        bucket_cap_mb: float | None = None,
        find_unused_parameters: bool = False,
        check_reduction: bool = False,
        gradient_as_bucket_view: bool = False,
        static_graph: bool = False,
        *,
        device_mesh=None,
        forward_sync_buffers: bool | None = None,
        algorithm: str = "auto",
        overlap: bool = True,
    ) -> None:
        super().__init__()
        Joinable.__init__(self)  # the join config: off until a Join context sets it
        checks.check_module(
            module, (DistributedDataParallel, torch.nn.parallel.DistributedDataParallel)
        )
        if algorithm not in ALGORITHMS:
            raise ValueError(
                f"DistributedDataParallel: algorithm must be one of {ALGORITHMS}, got {algorithm!r}"
            )
        self.device_ids = arguments.device_ids_for(module, device_ids, output_device)
        self.output_device = self.device_ids[0] if self.device_ids else None
        arguments.check_static_graph(static_graph)
        arguments.check_reduction_flag(check_reduction)
        self.forward_sync_buffers, init_sync_buffers = arguments.buffer_sync(
            broadcast_buffers, forward_sync_buffers
        )
        caps = BucketCaps.from_mb(bucket_cap_mb)
        self.module = module
        self.dim = dim
        self.device = next(module.parameters()).device
        self.process_group = groups.resolve(arguments.group_of(process_group, device_mesh))
        if not groups.is_member(self.process_group):
            raise ValueError(
                "DistributedDataParallel: this rank is not in process_group (dist.new_group "
                "returned its placeholder here) — expected a group this rank belongs to. "
                "Hint: wrap the model only on the group's ranks"
            )
        self.find_unused_parameters = find_unused_parameters
        self.gradient_as_bucket_view = gradient_as_bucket_view
        self.static_graph = False
        self.bucket_bytes_cap = caps.cap
        self.require_backward_grad_sync = True  # False inside no_sync()
        self.require_forward_param_sync = True  # did the last forward arm a sync?
        self._divide_by_initial_world_size = True  # set by a join hook
        self._caps, self._algorithm, self._overlap = caps, algorithm, overlap
        self._build_reducer()
        if init_sync:
            params, names = self.reducer.params, self.reducer.names
            bucket_of = bucket_of_params(self.reducer.assignment, len(params))
            buffers = list(module.named_buffers()) if self.forward_sync_buffers else None
            options = {
                "find_unused_parameters": find_unused_parameters,
                "broadcast_buffers": self.forward_sync_buffers,
            }
            checks.verify_same_model(self.process_group, params, names, bucket_of, buffers, options)
            states = [p.detach() for p in module.parameters()]  # rank 0's, frozen ones too
            if init_sync_buffers:
                states += [b.detach() for b in module.buffers()]
            self._broadcast_coalesced(states)
        self.reducer.install()

    def _build_reducer(self) -> None:
        """The reducer and the logger (at construction, and again after unpickling)."""
        params, names = checks.trainable_parameters(self.module)
        self.reducer = Reducer(
            params,
            names,
            self.process_group,
            self._caps,
            self.find_unused_parameters,
            self.gradient_as_bucket_view,
            self._algorithm,
            self._overlap,
        )
        self.logger = Logger(self, params, self.reducer.bucket_bytes())
        self.reducer.logger = self.logger
        checks.mark_wrapped(self.module, self)

    def __getstate__(self) -> dict:
        return pickling.getstate(self)

    def __setstate__(self, state: dict) -> None:
        pickling.setstate(self, state, super().__setstate__)

    @property
    def broadcast_buffers(self) -> bool:
        """torch's old name for ``forward_sync_buffers`` (a property there too)."""
        return self.forward_sync_buffers

    @broadcast_buffers.setter
    def broadcast_buffers(self, value: bool) -> None:
        self.forward_sync_buffers = value

    def forward(self, *inputs, **kwargs):
        # torch.compile(ddp) compiles the module's forward; the bookkeeping around it (Join,
        # buffer broadcasts, arming the reducer) stays eager, as around torch's DDP
        inputs, kwargs = self._pre_forward(inputs, kwargs)
        if trace.active:
            with trace.span("forward", lane="compute"):
                output = self.module(*inputs, **kwargs)
        else:
            output = self.module(*inputs, **kwargs)
        self._post_forward(output)
        return output

    @torch.compiler.disable
    def _pre_forward(self, inputs: tuple, kwargs: dict) -> tuple[tuple, dict]:
        grad_enabled = torch.is_grad_enabled()
        # Under Join: "I am still training"; the count of such ranks may be the divisor
        work = Join.notify_join_context(self)
        if work is not None and not self._divide_by_initial_world_size:
            self.reducer.div_factor = int(work.get_future().wait()[0].item())
        if grad_enabled and self.require_backward_grad_sync:
            self.logger.next_iteration(self.reducer)  # log the last one if it was timed
        if grad_enabled:
            self.reducer.prepare_for_forward()  # raises if the last backward never finished
        joining = self._join_config.enable
        if self._will_sync_buffers():
            # Under join, rank 0 may have stopped training: take the highest active rank's.
            self._sync_buffers(common_rank(self.process_group, True) if joining else 0)
        if joining:
            announce_sync(self.process_group, self.require_backward_grad_sync)
        if self.device_ids:
            device = torch.device(self.device.type, self.device_ids[0])
            inputs, kwargs = arguments.to_device((inputs, kwargs), device)
        return inputs, kwargs

    @torch.compiler.disable
    def _post_forward(self, output) -> None:
        # This forward decides if the next backward syncs: under no_sync(), run it inside too
        if torch.is_grad_enabled() and self.require_backward_grad_sync:
            self.require_forward_param_sync = True
            self.reducer.prepare_for_backward(output)
        else:
            self.require_forward_param_sync = False

    def join(
        self,
        divide_by_initial_world_size: bool = True,
        enable: bool = True,
        throw_on_early_termination: bool = False,
    ) -> Join:
        """torch's ``Join([self], ...)``: the context manager for uneven inputs (``join.py``)."""
        return Join(
            [self],
            enable,
            throw_on_early_termination,
            divide_by_initial_world_size=divide_by_initial_world_size,
        )

    def join_hook(self, **kwargs) -> JoinHook:
        """What a rank that ran out of inputs runs (``divide_by_initial_world_size=...``)."""
        return DDPJoinHook(self, kwargs.get("divide_by_initial_world_size", True))

    @property
    def join_device(self) -> torch.device:
        """Where Join's own all-reduces run: the module's device."""
        return self.device

    @property
    def join_process_group(self):
        """The group Join counts the ranks still training in: this DDP's."""
        return self.process_group

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Accumulate gradients locally for forwards run inside (the forward must be inside too:
        it arms the hooks); the next synchronized backward reduces the sum."""
        previous = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = previous

    def register_comm_hook(self, state: object, hook: Callable) -> None:
        """Reduce each bucket with ``hook(state, bucket) -> Future[Tensor]`` (once; hooks.py)."""
        hooks.check_hook(hook)  # what torch's refuses
        if self.reducer.comm_hook is not None:
            raise RuntimeError(
                "register_comm_hook: a communication hook is already registered — expected "
                "at most one per DDP. Hint: combine them into one hook"
            )
        if self.reducer.queue.armed and self.reducer.ready:
            raise RuntimeError("register_comm_hook: cannot change the hook during a backward")
        self.logger.data["comm_hook"] = hook.__qualname__
        self.reducer.comm_hook, self.reducer.comm_state = hook, state

    def _set_static_graph(self) -> None:
        """torch's private switch to ``static_graph=True``: refused like the argument, and
        after training has begun in torch's words."""
        if self.logger.iterations:
            raise self.logger.error(
                RuntimeError,
                "set_static_graph() should be called before training loop starts and after "
                "DistributedDataParallel is constructed.",
            )
        arguments.check_static_graph(True)

    def _get_ddp_logging_data(self) -> dict:
        """torch's dict of this DDP's configuration, buckets and timings (``logger.py``)."""
        return dict(self.logger.data)

    def _set_ddp_runtime_logging_sample_rate(self, sample_rate: int) -> None:
        """Time every ``sample_rate``-th iteration after the first 10 (torch's default: 100)."""
        self.logger.set_sample_rate(sample_rate)

    def _will_sync_buffers(self) -> bool:
        """Buffers are broadcast before this forward (torch's ``will_sync_module_buffers``)."""
        sync = self.require_forward_param_sync and self.forward_sync_buffers
        return sync and bool(self._buffers_list())

    def _buffers_list(self) -> list[torch.Tensor]:
        # Re-read the buffers each time: a module may reassign them (self.x = tensor).
        return list(self.module.buffers())

    def _sync_buffers(self, src: int = 0) -> None:
        self._broadcast_coalesced([b.detach() for b in self._buffers_list()], src)

    def _broadcast_coalesced(self, tensors: list[torch.Tensor], src: int = 0) -> None:
        broadcast_coalesced(tensors, self.process_group, src)
