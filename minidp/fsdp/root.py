"""The root of an FSDP model (its outermost unit): the forward/backward schedule of all units.

It owns the one communication thread all units' collectives run on, in submission order,
and prefetches by last step's order: at unit i's forward the next unit's all-gather, at its
backward the previous one's. Backward runs on DDP's engine (``comm/launch_queue.py``): a
unit whose gradients are in is freed and reduce-scattered; all are waited for before
``loss.backward()`` returns, as in FSDP2.

Test: ``pytest tests/test_fsdp.py``
"""

from __future__ import annotations

import weakref
from concurrent.futures import Future

import torch

from minidp import trace
from minidp.comm import Traffic, count_traffic
from minidp.comm.comm_thread import CommThread
from minidp.comm.launch_queue import LaunchQueue
from minidp.fsdp.unit import unit_of


def ensure_root(module) -> Root:
    """The root of ``module``'s units, made now (at its first forward) if there is none."""
    unit = unit_of(module)
    if unit.root is None:
        units = [u for m in module.modules() if (u := unit_of(m)) is not None]
        inner = [u.label for u in units if u.root is not None]
        if inner:
            raise RuntimeError(
                f"fully_shard: expected {type(module).__name__}'s units to have no root yet at "
                f"its first forward, got {inner} already scheduled by an inner module: "
                "unshard() was called on an inner unit before the model's first forward. "
                "Hint: run one forward first, or call unshard() on the outermost module"
            )
        for i, u in enumerate(units):
            u.label = "root" if i == 0 else f"unit {i}"
        Root(unit, units)
    return unit.root


class Root:
    """Schedules the units of one model: gathers, prefetches, reduce-scatters, waits."""

    def __init__(self, unit, units: list) -> None:
        self.unit = unit
        self.units = units  # every unit of the model, root first (module order)
        self.comm = CommThread(unit.group)
        self.order: list = []  # units in the order their forward started, this step
        self.last_order: list = []  # the previous step's order (for forward prefetch)
        self.post_order: list = []  # units in the order their forward ended (root last)
        self.gathers: dict[int, Future] = {}  # id(unit) -> all-gather in flight
        self.queue = LaunchQueue(self.comm, self._launch, in_order=False)  # each unit when ready
        self.index = {id(u): i for i, u in enumerate(units)}  # unit -> its group in the queue
        self.backward_started = False
        self.in_backward: set[int] = set()  # id(unit) of units this backward has reached
        self.started: dict[tuple[str, int], float] = {}  # (phase, id(unit)) -> trace time
        self.traffic = Traffic()  # bytes this rank moved, all steps (counted on the comm thread)
        self.peak_gathered = 0  # most bytes of full parameters held at once, this step
        for u in units:
            u.root = self

    # ---- gathering ---------------------------------------------------------------------
    def _counted(self, fn, *args):
        with count_traffic() as t:
            result = fn(*args)
        for field in ("sent_bytes", "recv_bytes", "sent_msgs", "recv_msgs"):
            setattr(self.traffic, field, getattr(self.traffic, field) + getattr(t, field))
        return result

    def _gather(self, unit) -> None:
        if not unit.shapes:  # nothing to gather (``Unit.gather_full``): no all-gather to trace
            unit.gather()
            return
        with trace.span(f"all-gather {unit.label}", lane="comm"):
            self._counted(unit.gather)
        self._note_peak()  # a prefetched unit lands while another one computes

    def _note_peak(self) -> None:
        gathered = sum(p.untyped_storage().nbytes() for u in self.units for p in u.full)
        self.peak_gathered = max(self.peak_gathered, gathered)

    def prefetch(self, unit) -> None:
        """Start ``unit``'s all-gather on the communication thread, unless it is there."""
        if unit is not None and not unit.is_unsharded and id(unit) not in self.gathers:
            if trace.active:
                trace.instant(f"issue all-gather {unit.label}", lane="hooks")
            self.gathers[id(unit)] = self.comm.submit(self._gather, unit)

    def unshard(self, unit) -> None:
        """Make sure ``unit``'s full parameters are gathered and installed on its module."""
        if unit.is_unsharded:  # (gathered by unshard() before the first forward: hook it)
            self._count_grads(unit)
            return
        self.prefetch(unit)
        with trace.span(f"wait all-gather {unit.label}", lane="compute"):
            self.gathers.pop(id(unit)).result()
        self._count_grads(unit)
        unit.install(unit.full)
        unit.is_unsharded = True
        self._note_peak()

    def _count_grads(self, unit) -> None:
        """Hook the trainable full parameters, weakly: hooks live in C++, unseen by the cycle
        collector, so a strong one would keep the model and its thread alive for good."""
        if not unit.hooks and unit.full:
            root, owner = weakref.ref(self), weakref.ref(unit)
            unit.hooks = [
                p.register_post_accumulate_grad_hook(lambda _: root().grad_ready(owner()))
                for p, rg in zip(unit.full, unit.requires_grad)
                if rg
            ]

    # ---- forward -----------------------------------------------------------------------
    def recomputing(self, unit) -> bool:
        """An inner unit's forward inside backward (activation checkpointing): it stays
        gathered for its backward, next; FSDP2 skips its forward bookkeeping there too."""
        if unit is self.unit:
            return False
        return id(unit) in self.in_backward or self.backward_started

    def pre_forward(self, unit) -> None:
        if self.recomputing(unit):
            self.unshard(unit)
            return
        if unit is self.unit:
            self._start_step()
        self.order.append(unit)
        self.unshard(unit)
        if unit.forward_prefetch is not None:  # set_modules_to_forward_prefetch: these
            for target in unit.forward_prefetch:
                self.prefetch(target)
        elif torch.is_grad_enabled() and unit in self.last_order:
            i = self.last_order.index(unit)
            self.prefetch(self.last_order[i + 1] if i + 1 < len(self.last_order) else None)
        self._mark("forward", unit)

    def _mark(self, phase: str, unit) -> None:
        if trace.active:
            self.started[phase, id(unit)] = trace.now_us()

    def _span(self, phase: str, unit) -> None:
        """Record ``phase`` of ``unit`` (compute lane) from its ``_mark`` until now."""
        if trace.active and (phase, id(unit)) in self.started:
            start = self.started.pop((phase, id(unit)))
            trace.complete(f"{phase} {unit.label}", start, trace.now_us(), lane="compute")

    def post_forward(self, unit) -> None:
        if self.recomputing(unit):
            return
        self._span("forward", unit)
        if not torch.is_grad_enabled():
            if unit is self.unit:  # inference: nothing stays gathered
                for u in self.units:
                    if u.is_unsharded:
                        u.free()
            elif unit.reshard_after_forward:
                unit.free()
            return
        self.post_order.append(unit)
        if unit is not self.unit and unit.reshard_after_forward:
            unit.reshard_after_forward_now()  # free (an int k: keep a chunk over k ranks)
        if unit is self.unit:
            self._arm()

    def _start_step(self) -> None:
        if self.backward_started and not self.queue.all_launched:
            missing = [
                f"{u.label}.{n}"
                for u, left in zip(self.units, self.queue.pending)
                for n, rg, p in zip(u.names, u.requires_grad, u.full)
                if rg and left and p.grad is None
            ]
            raise RuntimeError(
                f"fully_shard: the last backward finished without gradients for {missing} — "
                "every parameter that requires grad must take part in the loss (FSDP "
                "reduce-scatters each unit once all its gradients are in). Hint: freeze "
                "unused parameters with requires_grad_(False)"
            )
        for f in self.gathers.values():  # prefetches nobody used (e.g. an eval forward)
            f.result()
        self.gathers.clear()
        for u in self.units:
            u.adopt()  # load_state_dict(assign=True), p.data = ...: the module may hold new ones
            if u.follow_requires_grad() and u.is_unsharded:
                self._count_grads(u)  # a gathered unit (the root) is not unsharded again
            if u.is_unsharded and u is not self.unit and not u.kept_gathered:  # (else: reused)
                u.free()
            u.kept_gathered = False
        if self.order:
            self.last_order = self.order
        self.order, self.post_order = [], []
        self.backward_started = False
        self.in_backward.clear()
        self.peak_gathered = 0

    # ---- backward ----------------------------------------------------------------------
    def pre_backward(self, unit) -> None:
        """A gradient reached ``unit``'s output (once per output tensor, so this repeats)."""
        if not self.backward_started and self.queue.all_launched:
            # a backward after the last one finished: backward(retain_graph=True) again
            self._arm()
        self.backward_started = True
        self.unshard(unit)
        if id(unit) not in self.in_backward:  # the first gradient at this unit's output
            self.in_backward.add(id(unit))
            unit.prepare_grads()
        self._mark("backward", unit)
        if unit.backward_prefetch is not None:  # set_modules_to_backward_prefetch: these
            for target in unit.backward_prefetch:
                self.prefetch(target)
            return
        i = self.post_order.index(unit) if unit in self.post_order else 0  # backward: reversed
        if i > 0:
            self.prefetch(self.post_order[i - 1])

    def _arm(self) -> None:
        """Every unit waits for the gradients of its parameters that require grad."""
        self.queue.start([sum(u.requires_grad) for u in self.units])

    def grad_ready(self, unit) -> None:
        self.backward_started = True
        self.queue.ready(self.index[id(unit)])
        if self.queue.all_launched:
            self._finish_backward()

    def _launch(self, i: int):
        """Unit ``i``'s gradients are in: free it if it can go; the reduce-scatter, or None."""
        unit = self.units[i]
        if not any(unit.requires_grad):
            return None  # all frozen: nothing to reduce
        self._span("backward", unit)
        grads = unit.take_grads() if unit.reduce_grads else unit.keep_grads()
        # autograd may still read a frozen parameter: such a unit stays gathered till the end
        if unit is not self.unit and all(unit.requires_grad) and unit.reshard_after_backward:
            unit.free()
        return (lambda: self._reduce(unit, grads)) if unit.reduce_grads else None

    def _reduce(self, unit, grads):
        with trace.span(f"reduce-scatter {unit.label}", lane="comm"):
            return self._counted(unit.reduce, grads)

    def _finish_backward(self) -> None:
        with trace.span("wait reduce-scatters", lane="compute"):
            for unit, reduced in zip(self.units, self.queue.wait()):
                if reduced is not None:
                    unit.accumulate(reduced)
        for u in self.units:  # set_reshard_after_backward(False): kept for the next forward
            u.kept_gathered = u.is_unsharded and not u.reshard_after_backward
            if u.is_unsharded and u.reshard_after_backward:
                u.free()
        self.backward_started = False
        self.in_backward.clear()
