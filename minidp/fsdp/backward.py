"""The root's backward half: which gradients a backward brings, and when it is over.

Backward runs on DDP's engine (``comm/launch_queue.py``): each trainable full parameter's
post-accumulate-grad hook counts it in; a unit whose gradients are in is freed and
reduce-scattered while autograd computes on. Which parameters take part in a backward is
known once autograd computed the last of them (``register_multi_grad_hook``): the others
count as ready then, so a unit no gradient reached (a module the forward skipped, a
non-root unit run on its own) keeps its ``.grad`` as it was, as FSDP2's. A unit without
trainable parameters is freed when the gradient reaches its inputs. Everything is waited
for before ``loss.backward()`` returns, as in FSDP2.

Test: ``pytest tests/test_fsdp_moves.py tests/test_fsdp.py``
"""

from __future__ import annotations

import weakref

import torch

from minidp import trace


class Backward:
    """Mixed into ``Root`` (it reads the root's fields: units, queue, comm, ...)."""

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

    def watch_end(self) -> None:
        """(Re)register the hook that fires once autograd computed every gradient of the
        trainable full parameters this backward reaches (before the last one is added)."""
        params = [p for u in self.units for p, rg in zip(u.full, u.requires_grad) if rg]
        key = tuple(map(id, params))
        if key == self.end_key:
            return
        _remove(self.end_hook)
        self.end_key = key
        if params:
            root = weakref.ref(self)
            self.end_hook.append(
                torch.autograd.graph.register_multi_grad_hook(
                    params, lambda grads: root().end_of_gradients(grads)
                )
            )

    def pre_backward(self, unit) -> None:
        """A gradient reached ``unit``'s output (once per output tensor, so this repeats)."""
        if not self.armed:
            self._arm()
        self.backward_started = True
        if unit.unshard_in_backward:
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
        """A backward starts: every unit waits for its trainable full parameters (a unit
        never gathered has none yet: it cannot take part)."""
        self.watch_end()
        self.unreached: set[int] = set()
        self.queue.start([sum(rg for _, rg in zip(u.full, u.requires_grad)) for u in self.units])
        self.armed = True

    def grad_ready(self, unit) -> None:
        if not self.armed:
            self._arm()
        self.backward_started = True
        self.queue.ready(self.index[id(unit)])
        if self.queue.all_launched:
            self._finish_backward()

    def end_of_gradients(self, grads: list) -> None:
        """Autograd computed the last gradient this backward has: the trainable parameters
        that got none count as ready now (their unit is reduced without them)."""
        if not self.armed:
            self._arm()
        k = 0
        for i, u in enumerate(self.units):
            missing = []
            for _, rg in zip(u.full, u.requires_grad):
                if rg:
                    missing.append(grads[k] is None)
                    k += 1
            if missing and all(missing):  # not reached: not reduced, even gradients kept
                self.unreached.add(i)  # from a backward without sync (FSDP2 waits too)
            for _ in range(sum(missing)):
                self.queue.ready(i)
        if self.queue.all_launched:  # (no unit waits for the last gradient's own hook)
            self._finish_backward()

    def frozen_backward_done(self, unit) -> None:
        """The backward through a unit without trainable parameters is done: free it."""
        if unit.is_unsharded and unit.reshard_after_backward:
            unit.free()

    def _launch(self, i: int):
        """Unit ``i``'s gradients are in: free it if it can go; the reduce-scatter, or None."""
        unit = self.units[i]
        if not any(unit.requires_grad) or i in self.unreached:
            return None  # all frozen, or this backward did not reach it: nothing to do
        self._span("backward", unit)
        grads = unit.take_grads() if unit.reduce_grads else unit.keep_grads()
        # autograd may still read a frozen parameter: such a unit stays gathered till the end
        frees = all(unit.requires_grad) and unit.reshard_after_backward and unit.is_unsharded
        if unit is not self.unit and frees:  # (a unit this backward did not reach: as it is)
            unit.free()
        if not unit.reduce_grads or not grads:
            return None  # no sync, or no gradient reached this unit
        return lambda: self._reduce(unit, grads)

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
            u.to_run.clear()  # a group's module the forward skipped: its pass is over
        self.armed = self.backward_started = False
        self.in_backward.clear()

    def reset_iter_state(self) -> None:
        """After an exception mid-forward or mid-backward: wait for what is in flight, drop
        this iteration's gradients in flight, reshard every unit (FSDP2's recovery)."""
        for f in [*self.gathers.values(), *(f for f in self.queue.futures if f is not None)]:
            f.exception()  # wait; its error (if any) was the iteration's
        self.gathers.clear()
        for u in self.units:
            if u.is_unsharded:
                u.free()
            u.to_run.clear()
            u.partial, u.kept_gathered = None, False
            u.kept = [None] * len(u.kept)
        self.order, self.post_order = [], []
        self.armed = self.backward_started = False
        self.in_backward.clear()


def _remove(handles: list) -> None:
    while handles:
        handles.pop().remove()
