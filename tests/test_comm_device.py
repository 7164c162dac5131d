"""Which memory each backend sends from (``minidp.comm.device``), decided explicitly.

The copy itself only happens on a machine with CUDA (``tests/test_gpu.py`` compares the
collectives on CUDA tensors with torch's there); here the decision is checked for every
backend spelling torch uses, and on the real groups minidp runs on: a process world's
default group and a thread world's bare ``ProcessGroupGloo`` both read as gloo, and a host
tensor on them travels as it is.

Run: ``pytest tests/test_comm_device.py``
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from minidp.comm import device, group
from minidp.launch import run_threads


@pytest.mark.parametrize(
    "backend, device_type, expected",
    [
        ("gloo", "cpu", True),
        ("gloo", "cuda", False),  # gloo writes from the pointer: host memory only
        ("nccl", "cuda", True),
        ("nccl", "cpu", False),  # NCCL moves GPU memory only
        ("cpu:gloo,cuda:nccl", "cpu", True),  # one backend per device type
        ("cpu:gloo,cuda:nccl", "cuda", True),
        ("cpu:gloo", "cuda", False),
        ("GLOO", "cpu", True),
        ("mpi", "cuda", True),  # unknown: trusted with what it is given
    ],
)
def test_which_backend_reads_which_memory(backend, device_type, expected):
    assert device.reads(backend, device_type) is expected


def _on_thread_rank(rank: int, world: int) -> tuple:
    g = group.resolve(None)
    return device.backend_of(g), device.carrier(g, torch.ones(2)), type(g).__name__


def test_a_thread_worlds_group_reads_as_gloo_and_host_tensors_travel_as_they_are():
    for backend, carrier, kind in run_threads(_on_thread_rank, 2):
        assert (backend, carrier, kind) == ("gloo", None, "ProcessGroupGloo")


def _on_process_rank(rank: int, world: int) -> tuple:
    g = dist.group.WORLD
    sub = dist.new_group([0, 1])
    return device.backend_of(g), device.backend_of(sub), device.carrier(g, torch.ones(2))


def test_a_process_worlds_groups_read_as_gloo(process_world):
    for result in process_world(2).run(_on_process_rank):
        assert result == ("gloo", "gloo", None)
