"""The glue behind DDP, ZeRO-2 and FSDP's backward: gradient hooks -> ready -> launch -> finish.

``LaunchQueue`` is driven here directly, with a real communication thread, real autograd
hooks, and an owner whose tasks record where and in which order they ran (no collective
needed to see the schedule); the wrappers' own tests check the bits it produces against
torch (DDP, ZeRO-2, FSDP).

Run: ``pytest tests/test_launch_queue.py``
"""

from __future__ import annotations

import gc
import threading
import weakref

import pytest
import torch

from minidp.comm import count_traffic
from minidp.comm.launch_queue import CommThread, LaunchQueue


class Owner:
    """A wrapper's stand-in: ``counts`` gradients per group; ``launch(i)`` notes the launch
    (and how many gradients had arrived), the task its thread; ``finish`` waits, once."""

    def __init__(self, counts, in_order=True, nothing_for=(), fail=False) -> None:
        self.per_group = list(counts)
        self.launched: list[int] = []
        self.arrived: list[int] = []
        self.ran_on: list[str] = []
        self.finished: list[list] = []
        self.nothing_for, self.fail = set(nothing_for), fail
        self.queue = LaunchQueue(
            CommThread(None),
            counts=self.counts,
            launch=self.launch,
            finish=self.finish,
            in_order=in_order,
        )

    def counts(self) -> list[int]:
        return self.per_group

    def launch(self, i: int):
        self.launched.append(i)
        self.arrived.append(self.queue.arrived[i])
        if i in self.nothing_for:
            return None

        def task():
            self.ran_on.append(threading.current_thread().name)
            if self.fail:
                raise ValueError(f"group {i} failed")
            return f"group {i}"

        return task

    def finish(self) -> None:
        self.finished.append(self.queue.wait())

    def on_grad(self, i: int) -> None:
        self.queue.ready(i)


def test_in_order_holds_a_complete_group_back_until_every_earlier_one_has_gone():
    owner = Owner([1, 2, 1], in_order=True)
    owner.queue.ready(2)  # group 2 complete first (and the first ready arms): it waits
    assert owner.queue.armed and owner.launched == []
    owner.queue.ready(0)
    assert owner.launched == [0]
    owner.queue.ready(1)
    assert owner.launched == [0]  # one of group 1's two gradients is still missing
    owner.queue.ready(1)
    assert owner.launched == [0, 1, 2] and not owner.queue.armed
    assert owner.finished == [["group 0", "group 1", "group 2"]]  # in group order, once
    assert set(owner.ran_on) == {owner.ran_on[0]} and owner.ran_on[0].startswith("minidp-comm")


def test_any_order_launches_each_group_the_moment_it_is_complete():
    owner = Owner([1, 2, 1], in_order=False)
    owner.queue.ready(2)
    assert owner.launched == [2]  # FSDP: no waiting behind an earlier unit
    for i in (1, 0, 1):
        owner.queue.ready(i)
    assert owner.launched == [2, 0, 1]
    assert owner.finished == [["group 0", "group 1", "group 2"]]


def test_hold_launches_nothing_before_every_group_is_complete():
    """DDP's ``overlap=False``: the baseline without overlap."""
    owner = Owner([1, 1])
    owner.queue.arm(hold=True)
    owner.queue.ready(0)
    assert owner.launched == []
    owner.queue.ready(1)
    assert owner.launched == [0, 1]


def test_empty_groups_go_at_arming_and_a_group_with_nothing_to_send_is_done():
    owner = Owner([0, 1], nothing_for={0})
    owner.queue.arm()  # group 0: all frozen. Arming alone finishes nothing (FSDP's
    assert owner.launched == [0] and owner.finished == []  # backward is only starting)
    owner.queue.ready(1)
    assert owner.finished == [[None, "group 1"]]


def test_a_backward_that_ends_early_waits_for_what_went():
    owner = Owner([1, 1])
    owner.queue.ready(0)
    owner.queue.close()  # ZeRO-2's step() after a backward that missed a bucket
    assert owner.finished == [["group 0", None]] and not owner.queue.armed


def test_an_error_on_the_thread_reaches_the_backward():
    owner = Owner([1], fail=True)
    with pytest.raises(ValueError, match="group 0 failed"):
        owner.queue.ready(0)


def _params(n: int) -> list[torch.nn.Parameter]:
    return [torch.nn.Parameter(torch.full((2,), float(k + 1))) for k in range(n)]


def test_hooks_count_each_gradient_and_finish_once_per_backward():
    params = _params(4)
    owner = Owner([2, 1, 1])
    owner.queue.hook(params, owner.on_grad, keys=[0, 0, 1, 2])  # group of each parameter
    for step in range(3):
        sum((p * p).sum() for p in params).backward()
        assert owner.finished == [["group 0", "group 1", "group 2"]] * (step + 1)
        assert owner.launched == [0, 1, 2] * (step + 1) and not owner.queue.armed


def test_watch_end_counts_the_parameters_a_backward_did_not_reach():
    """FSDP: unit 1's second parameter and all of unit 2 get no gradient; the end of the
    gradients lets unit 1 go with the one that arrived, and unit 2 with none (its launch
    sees ``arrived == 0``: FSDP leaves its .grad alone)."""
    a, b, c, d = params = _params(4)
    owner = Owner([1, 2, 1], in_order=False)
    owner.queue.hook(params, owner.on_grad, keys=[0, 1, 1, 2])
    owner.queue.watch_end(params, [0, 1, 1, 2])
    (a.sum() + b.sum()).backward()
    assert sorted(zip(owner.launched, owner.arrived)) == [(0, 1), (1, 1), (2, 0)]
    assert len(owner.finished) == 1 and not owner.queue.armed
    assert c.grad is None and d.grad is None


def test_the_end_of_the_gradients_arms_and_finishes_when_no_hook_comes_after_it():
    """The end fires before the last gradient is accumulated; when that one counts for no
    group (FSDP: a unit gathered after the backward was armed), the end itself arms the
    queue and finishes the backward."""
    a, b, c = _params(3)
    owner = Owner([1, 1], in_order=False)
    owner.queue.hook([a, c], owner.on_grad, keys=[0, 1])
    owner.queue.watch_end([a, b, c], [0, 1, 1])
    (b * 2).sum().backward()  # b alone: a and c got none
    assert owner.finished == [["group 0", "group 1"]] and owner.arrived == [0, 0]


def _hooks_of(p: torch.Tensor) -> int:
    """How many post-accumulate-grad hooks ``p`` holds (torch's private table, >= 2.1)."""
    return len(getattr(p, "_post_accumulate_grad_hooks", None) or {})


def test_a_dropped_owner_is_freed_at_once_and_takes_its_hooks_with_it():
    """The queue holds its owner's methods weakly, and the hooks hold them weakly: no
    cycle through C++ hooks, so a dropped optimizer goes without the cycle collector, and
    so do its hooks (a later backward runs none of it)."""
    (p,) = _params(1)
    owner = Owner([1])
    owner.queue.hook([p], owner.on_grad)
    owner.queue.watch_end([p], [0])
    assert _hooks_of(p) == 1
    ref = weakref.ref(owner)
    gc.disable()
    try:
        del owner
        assert ref() is None
    finally:
        gc.enable()
    assert _hooks_of(p) == 0
    (p * 2).sum().backward()  # the multi-grad hook is gone too: nothing runs, nothing fails
    assert torch.equal(p.grad, torch.full((2,), 2.0))


def test_remove_takes_the_hooks_off_now():
    """``remove()``: ZeRO-2's ``remove_hooks``; ``remove(handles)``: FSDP re-hooks a unit."""
    params = _params(2)
    owner = Owner([1, 1])
    first = owner.queue.hook(params[:1], owner.on_grad)
    owner.queue.hook(params[1:], owner.on_grad, keys=[1])
    owner.queue.remove(first)
    assert [_hooks_of(p) for p in params] == [0, 1] and len(owner.queue.handles) == 1
    owner.queue.remove()
    assert [_hooks_of(p) for p in params] == [0, 0] and not owner.queue.handles
    sum(p.sum() for p in params).backward()
    assert owner.launched == [] and not owner.queue.armed


def test_traffic_counted_on_the_submitting_thread_includes_the_comm_thread():
    from minidp.comm import traffic

    owner = Owner([1])
    owner.launch = lambda i: lambda: traffic.add("send", 100)
    owner.queue = LaunchQueue(
        CommThread(None), counts=owner.counts, launch=owner.launch, finish=owner.finish,
        in_order=True,
    )  # fmt: skip
    with count_traffic() as t:
        owner.queue.ready(0)
    assert (t.sent_bytes, t.sent_msgs) == (100, 1)
