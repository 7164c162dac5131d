"""The root's backward half: which gradients a backward brings, and when it is over.

Backward runs on DDP's engine (``comm/launch_queue.py``): each trainable full parameter's
post-accumulate-grad hook counts it in; a unit whose gradients are in is freed and
reduce-scattered while autograd computes on. Which parameters take part in a backward is
known once autograd computed the last of them (the queue's ``watch_end``): the others
count as ready then, so a unit no gradient reached (a module the forward skipped, a
non-root unit run on its own) keeps its ``.grad`` as it was, as FSDP2's. A unit without
trainable parameters is freed when the gradient reaches its inputs. Everything is waited
for before ``loss.backward()`` returns, as in FSDP2.

Test: ``pytest tests/test_fsdp_moves.py tests/test_fsdp.py``
"""

from __future__ import annotations

from minidp import trace


class Backward:
    """Mixed into ``Root`` (it reads the root's fields: units, queue, comm, ...)."""

    def _count_grads(self, unit) -> None:
        """Hook the trainable full parameters: each counts for its unit (the queue's hooks)."""
        if not unit.hooks and unit.full:
            params = [p for p, rg in zip(unit.full, unit.requires_grad) if rg]
            keys = [self.units.index(unit)] * len(params)
            unit.hooks = self.queue.hook(params, self.grad_ready, keys)

    def watch_end(self) -> None:
        """Watch for the end of the gradients of the trainable full parameters: those this
        backward does not reach count as ready then."""
        trainable = [
            (p, i) for i, u in enumerate(self.units) for p, rg in zip(u.full, u.requires_grad) if rg
        ]
        self.queue.watch_end([p for p, _ in trainable], [i for _, i in trainable])

    def pre_backward(self, unit) -> None:
        """A gradient reached ``unit``'s output (once per output tensor, so this repeats)."""
        if not self.queue.armed:
            self.queue.arm()
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

    def _arm(self) -> list[int]:
        """A backward starts (the queue asks): every unit waits for its trainable full
        parameters (a unit never gathered has none yet: it cannot take part)."""
        self.watch_end()
        return [sum(rg for _, rg in zip(u.full, u.requires_grad)) for u in self.units]

    def grad_ready(self, i: int) -> None:
        self.backward_started = True
        self.queue.ready(i)  # the first arms; the last launch finishes

    def frozen_backward_done(self, unit) -> None:
        """The backward through a unit without trainable parameters is done: free it."""
        if unit.is_unsharded and unit.reshard_after_backward:
            unit.free()

    def _launch(self, i: int):
        """Unit ``i``'s gradients are in: free it if it can go; the reduce-scatter, or None."""
        unit = self.units[i]
        if not self.queue.arrived[i]:  # all frozen, or this backward did not reach it: not
            return None  # reduced, even gradients kept from a backward without sync (FSDP2)
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
        self.backward_started = False
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
        self.queue.armed = self.backward_started = False
        self.in_backward.clear()
