"""The engine behind DDP, ZeRO-2 and FSDP's backward: groups launched as they complete.

``LaunchQueue`` is driven here directly, with a real communication thread and tasks that
record where and in which order they ran (no collective needed to see the schedule); the
wrappers' own tests check the bits it produces against torch (DDP, ZeRO-2, FSDP).

Run: ``pytest tests/test_launch_queue.py``
"""

from __future__ import annotations

import threading

import pytest

from minidp.comm import count_traffic
from minidp.comm.comm_thread import CommThread
from minidp.comm.launch_queue import LaunchQueue


class Recorder:
    """A wrapper's stand-in: ``launch(i)`` notes the launch; the task notes its thread."""

    def __init__(self, nothing_for=()) -> None:
        self.launched: list[int] = []
        self.ran_on: list[str] = []
        self.nothing_for = set(nothing_for)

    def launch(self, i: int):
        self.launched.append(i)
        if i in self.nothing_for:
            return None

        def task():
            self.ran_on.append(threading.current_thread().name)
            return f"group {i}"

        return task


def _queue(in_order: bool, **kw) -> tuple[LaunchQueue, Recorder]:
    rec = Recorder(**kw)
    return LaunchQueue(CommThread(None), rec.launch, in_order=in_order), rec


def test_in_order_holds_a_complete_group_back_until_every_earlier_one_has_gone():
    queue, rec = _queue(in_order=True)
    queue.start([1, 2, 1])
    queue.ready(2)  # group 2 complete first: it must wait for 0 and 1
    assert rec.launched == [] and not queue.all_launched
    queue.ready(0)
    assert rec.launched == [0]
    queue.ready(1)
    assert rec.launched == [0]  # one of group 1's two gradients is still missing
    queue.ready(1)
    assert rec.launched == [0, 1, 2] and queue.all_launched
    assert queue.wait() == ["group 0", "group 1", "group 2"]  # in group order
    assert set(rec.ran_on) == {rec.ran_on[0]} and rec.ran_on[0].startswith("minidp-comm")


def test_as_completed_launches_each_group_the_moment_it_is_complete():
    queue, rec = _queue(in_order=False)
    queue.start([1, 2, 1])
    queue.ready(2)
    assert rec.launched == [2]  # FSDP: no waiting behind an earlier unit
    queue.ready(1)
    queue.ready(0)
    queue.ready(1)
    assert rec.launched == [2, 0, 1] and queue.all_launched
    assert queue.wait() == ["group 0", "group 1", "group 2"]


def test_hold_launches_nothing_before_every_group_is_complete():
    """DDP's ``overlap=False``: the baseline without overlap."""
    queue, rec = _queue(in_order=True)
    queue.start([1, 1], hold=True)
    queue.ready(0)
    assert rec.launched == []
    queue.ready(1)
    assert rec.launched == [0, 1]


def test_empty_groups_go_at_once_and_a_group_with_nothing_to_send_is_done():
    queue, rec = _queue(in_order=True, nothing_for={0})
    queue.start([0, 1])  # group 0: all frozen
    assert rec.launched == [0]
    queue.ready(1)
    assert queue.wait() == [None, "group 1"]


def test_a_backward_that_ends_early_waits_for_what_went():
    queue, _ = _queue(in_order=True)
    queue.start([1, 1])
    queue.ready(0)
    assert not queue.all_launched and queue.wait() == ["group 0", None]


def test_an_error_on_the_thread_reaches_the_waiting_thread():
    def launch(i):
        def task():
            raise ValueError(f"group {i} failed")

        return task

    queue = LaunchQueue(CommThread(None), launch, in_order=True)
    queue.start([1])
    queue.ready(0)
    with pytest.raises(ValueError, match="group 0 failed"):
        queue.wait()


def test_the_queue_holds_its_owner_weakly():
    """An owner's bound method is held weakly (no cycle): a dropped optimizer is freed at
    once, so its claim on the parameters lapses without waiting for the cycle collector."""
    import gc
    import weakref

    class Owner:
        def __init__(self) -> None:
            self.queue = LaunchQueue(CommThread(None), self.launch, in_order=True)

        def launch(self, i):
            return None

    gc.disable()
    try:
        owner = Owner()
        ref = weakref.ref(owner)
        del owner
        assert ref() is None
    finally:
        gc.enable()


def test_traffic_counted_on_the_submitting_thread_includes_the_comm_thread():
    from minidp.comm import traffic

    def launch(i):
        return lambda: traffic.add("send", 100)

    queue = LaunchQueue(CommThread(None), launch, in_order=True)
    with count_traffic() as t:
        queue.start([1])
        queue.ready(0)
        queue.wait()
    assert (t.sent_bytes, t.sent_msgs) == (100, 1)
