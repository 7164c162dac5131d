"""parallel_apply: threads, grad mode and autocast carried over, exceptions re-raised.

Run: ``pytest tests/test_dp_parallel_apply.py``

torch's behaviour (``torch/nn/parallel/parallel_apply.py``): one thread per replica, the
caller's grad mode and autocast set again inside each thread, a replica's exception
re-raised with its type and "Caught <Type> in replica <i> on device <d>. Original
Traceback ..."; the lowest failing replica wins.
"""

from __future__ import annotations

import threading

import pytest
import torch
from torch import nn

from minidp.dp import DataParallel, parallel_apply

CPU3 = ["cpu"] * 3


class Probe(nn.Module):
    """Records the thread and the grad / autocast state it runs under."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 2)
        self.seen: list = []

    def forward(self, x):
        self.seen.append(
            (threading.current_thread(), torch.is_grad_enabled(), torch.is_autocast_enabled("cpu"))
        )
        return self.fc(x)


def test_one_thread_per_replica_outputs_in_order():
    probe = Probe()
    xs = [torch.full((2, 4), float(i)) for i in range(3)]
    outs = parallel_apply([probe] * 3, xs, devices=CPU3)
    assert all(torch.equal(o, probe.fc(x)) for o, x in zip(outs, xs))
    threads = {t for t, _, _ in probe.seen}
    assert len(threads) == 3 and threading.current_thread() not in threads


def test_single_replica_runs_in_the_caller():
    probe = Probe()
    parallel_apply([probe], [torch.ones(1, 4)])  # device inferred from the tensor
    assert probe.seen[0][0] is threading.current_thread()


def test_grad_mode_is_carried_into_threads():
    probe = Probe()
    with torch.no_grad():
        outs = parallel_apply([probe] * 3, [torch.ones(2, 4)] * 3, devices=CPU3)
    assert [g for _, g, _ in probe.seen] == [False] * 3
    assert not any(o.requires_grad for o in outs)
    probe.seen.clear()
    parallel_apply([probe] * 3, [torch.ones(2, 4)] * 3, devices=CPU3)
    assert [g for _, g, _ in probe.seen] == [True] * 3


def test_autocast_is_carried_into_threads():
    probe = Probe()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = DataParallel(probe, device_ids=CPU3)(torch.ones(6, 4))
    assert [a for _, _, a in probe.seen] == [True] * 3
    assert out.dtype == torch.bfloat16  # a thread without autocast would give float32


def test_inputs_and_kwargs_forms():
    def fn(a, b=0, *, c=1):
        return a * c + b

    outs = parallel_apply(
        [fn, fn], [torch.ones(1), (torch.ones(1), 2)], [{"c": 3}, {}], devices=["cpu"] * 2
    )
    assert [o.item() for o in outs] == [3.0, 3.0]


class Fails(nn.Module):
    """Replica ``i`` sees rows filled with ``i``; some indices raise."""

    def __init__(self, bad: dict) -> None:
        super().__init__()
        self.bad = bad

    def forward(self, x):
        i = int(x[0, 0])
        if i in self.bad:
            raise self.bad[i]
        return x


def rows(n: int) -> torch.Tensor:
    return torch.arange(n, dtype=torch.float32).repeat_interleave(2)[:, None].repeat(1, 2)


def test_error_replica_exception_keeps_type_index_device_traceback():
    dp = DataParallel(Fails({1: ValueError("chunk 1 is bad")}), device_ids=CPU3)
    with pytest.raises(ValueError) as info:
        dp(rows(3))
    text = str(info.value)
    assert text.startswith("Caught ValueError in replica 1 on device cpu.\n")
    assert "Original Traceback (most recent call last):" in text
    assert "in forward" in text and "raise self.bad[i]" in text  # the replica's own frames
    assert text.rstrip().endswith("ValueError: chunk 1 is bad")


def test_error_lowest_failing_replica_wins():
    dp = DataParallel(Fails({2: KeyError("k2"), 1: TypeError("t1")}), device_ids=CPU3)
    with pytest.raises(TypeError, match=r"Caught TypeError in replica 1 on device cpu"):
        dp(rows(3))


def test_error_key_error_message_stays_readable():
    dp = DataParallel(Fails({0: KeyError("missing")}), device_ids=CPU3)
    with pytest.raises(KeyError, match=r"Caught KeyError in replica 0") as info:
        dp(rows(3))
    assert "\n" in str(info.value) and "\\n" not in str(info.value)


def test_error_exception_type_with_other_constructor_becomes_runtime_error():
    class Picky(Exception):
        def __init__(self, code: int, detail: str) -> None:
            super().__init__(f"{code}: {detail}")

    dp = DataParallel(Fails({2: Picky(7, "odd")}), device_ids=CPU3)
    with pytest.raises(RuntimeError, match=r"Caught Picky in replica 2 on device cpu(.|\n)*7: odd"):
        dp(rows(3))


def test_error_lengths_differ():
    with pytest.raises(
        ValueError, match=r"expected one entry of inputs per module \(2\) but got 1"
    ):
        parallel_apply([nn.Identity()] * 2, [torch.ones(1)], devices=["cpu"] * 2)
    with pytest.raises(ValueError, match=r"one entry of devices per module \(2\) but got 3"):
        parallel_apply([nn.Identity()] * 2, [torch.ones(1)] * 2, devices=CPU3)


def test_error_device_cannot_be_inferred():
    with pytest.raises(
        ValueError, match=r"expected a tensor in the inputs of replica 1 .* devices="
    ):
        parallel_apply([nn.Identity()] * 2, [torch.ones(1), "text"])
