"""The root of an FSDP model (its outermost unit): the forward/backward schedule of all units.

The unit whose forward runs first becomes the root (FSDP2's lazy init) of every unit below
it. It owns the one communication thread all units' collectives run on, in submission
order (a group without send/recv: run here, ``collectives.Inline``), and prefetches by
last step's order: at unit i's forward the next unit's all-gather, at its backward the
previous one's. The backward half: ``backward.py``.

Test: ``pytest tests/test_fsdp.py tests/test_fsdp_moves.py``
"""

from __future__ import annotations

from concurrent.futures import Future

import torch

from minidp import trace
from minidp.comm import Traffic, count_traffic
from minidp.comm.launch_queue import CommThread, LaunchQueue
from minidp.fsdp.backward import Backward
from minidp.fsdp.collectives import Inline, has_send_recv
from minidp.fsdp.unit import unit_of


def ensure_root(module) -> Root:
    """The root of ``module``'s units, made now (at its first forward) if there is none."""
    unit = unit_of(module)
    if unit.root is None:
        lazy_init(unit)
    return unit.root


def lazy_init(unit) -> None:
    """FSDP2's lazy init: the unit whose forward runs first roots every unit below it."""
    if len(unit.modules) > 1:
        raise RuntimeError(
            f"FSDP requires a single root module but got {unit.modules}. Hint: call "
            "fully_shard on the model that holds them too, and run forward through it"
        )
    root_module, units = unit.module, []
    for name, m in root_module.named_modules():
        u = unit_of(m)
        if u is None or u in units:
            continue
        if u is not unit and u.root is not None:
            raise RuntimeError(
                f"FSDP state has already been lazily initialized for {name}\nFSDP requires "
                "running forward through the root module first. Hint: unshard() or a forward "
                f"of {name} before the model's first forward made it a root of its own"
            )
        units.append(u)
    fqns = {id(p): n for n, p in root_module.named_parameters()}
    for i, u in enumerate(units):
        if u.refusal is not None:
            raise u.refusal
        u.adopt()
        u.check_not_meta([fqns.get(id(p), n) for n, p in zip(u.names, u.sharded)])
        u.label = "root" if i == 0 else f"unit {i}"
    Root(unit, units)


class Root(Backward):
    """Schedules the units of one model: gathers, prefetches, reduce-scatters, waits."""

    def __init__(self, unit, units: list) -> None:
        self.unit = unit
        self.units = units  # every unit of the model, root first (module order)
        own = all(has_send_recv(u.group) for u in units)
        self.comm = CommThread(unit.group) if own else Inline()
        self.order: list = []  # units in the order their forward started, this step
        self.last_order: list = []  # the previous step's order (for forward prefetch)
        self.post_order: list = []  # units in the order their forward ended (root last)
        self.gathers: dict[int, Future] = {}  # id(unit) -> all-gather in flight
        # each unit as its gradients are in; armed from a backward's first hook to its end
        self.queue = LaunchQueue(
            self.comm,
            counts=self._arm,
            launch=self._launch,
            finish=self._finish_backward,
            in_order=False,
        )
        self.backward_started = False
        self.in_backward: set[int] = set()  # id(unit) of units this backward has reached
        self.started: dict[tuple[str, int], float] = {}  # (phase, id(unit)) -> trace time
        self.traffic = Traffic()  # bytes this rank moved, all steps (counted on the comm thread)
        self.peak_gathered = 0  # most bytes of full parameters held at once, this step
        for u in units:
            u.root = self
            u.is_root = u is unit

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
        gathered = sum(p.untyped_storage().nbytes() for u in self.units for p in u.full_local)
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
        # reshard_after_forward=None: the root keeps its parameters for the backward next
        reshard = unit.reshard_after_forward and not (unit is self.unit and unit.auto_reshard)
        if not torch.is_grad_enabled():
            if unit is self.unit:  # inference: nothing stays gathered
                for u in self.units:
                    if u.is_unsharded:
                        u.free()
            elif reshard:
                unit.free()
            return
        self.post_order.append(unit)
        if reshard:
            unit.reshard_after_forward_now()  # free (an int k: keep a chunk over k ranks)
        self.watch_end()

    def _start_step(self) -> None:
        """The root's forward starts: last step's leftovers go (prefetches, gathers)."""
        for u in self.units:  # set_post_optim_event: the optimizer step is done
            if u.post_optim_event is not None:
                u.post_optim_event.synchronize()
                u.post_optim_event = None
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
        self.queue.armed = self.backward_started = False  # a backward that never ended: forgotten
        self.in_backward.clear()
        self.peak_gathered = 0
