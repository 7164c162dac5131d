"""minidp.launch: real worlds start, return results in rank order, and fail loudly.

Run: ``pytest tests/test_launch.py``
"""

from __future__ import annotations

import os
import pickle
import re
import signal

import pytest
import torch
import torch.distributed as dist

import minidp
from minidp.launch import WorkerError, child_processes, run_threads, spawn
from minidp.launch.threads import FIRST_COLLECTIVE_RACES


def _sum_ranks(rank, world):
    t = torch.full((3,), float(rank))
    minidp.comm.ring_all_reduce(t)
    env = {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR")}
    return rank, t, dist.get_rank(), dist.get_world_size(), env


def test_process_world_runs_in_rank_order_and_sets_torchrun_env(process_world):
    world = process_world(3)
    for _ in range(2):  # reusable across calls
        out = world.run(_sum_ranks)
        for rank, (r, t, drank, dworld, env) in enumerate(out):
            assert r == rank == drank and dworld == 3
            assert torch.equal(t, torch.full((3,), 3.0))
            assert env == {
                "RANK": str(rank),
                "WORLD_SIZE": "3",
                "LOCAL_RANK": str(rank),
                "MASTER_ADDR": "127.0.0.1",
            }


def _raise_on_rank_1(rank, world):
    if rank == 1:
        raise ValueError("bad batch on rank 1")
    minidp.comm.ring_all_reduce(torch.ones(4))


def _exit_on_rank_2(rank, world):
    if rank == 2:
        os._exit(3)
    minidp.comm.ring_all_reduce(torch.ones(4))


def _kill_rank_0(rank, world):
    if rank == 0:
        os.kill(os.getpid(), signal.SIGKILL)
    minidp.comm.ring_all_reduce(torch.ones(4))


def test_spawn_names_the_rank_that_raised_and_leaves_no_process():
    before = child_processes()
    with pytest.raises(WorkerError, match=r"rank 1 raised ValueError: bad batch on rank 1") as info:
        spawn(_raise_on_rank_1, 3, timeout=30)
    assert info.value.rank == 1 and info.value.exc_type == "ValueError"
    assert "_raise_on_rank_1" in info.value.traceback  # the rank's own traceback
    assert child_processes() <= before


def test_spawn_reports_a_hard_exit_and_the_bystanders():
    before = child_processes()
    with pytest.raises(WorkerError, match=r"rank 2 exited with code 3 without returning") as info:
        spawn(_exit_on_rank_2, 3, timeout=30)
    assert info.value.rank == 2 and info.value.exitcode == 3
    assert child_processes() <= before


def test_spawn_reports_a_signal():
    before = child_processes()
    with pytest.raises(WorkerError, match=r"rank 0 was killed by signal SIGKILL"):
        spawn(_kill_rank_0, 2, timeout=30)
    assert child_processes() <= before


def _where_it_started(rank, world):
    with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
        parent = f.read().replace(b"\0", b" ").decode()
    return parent, os.environ.get("MINIDP_PROBE"), minidp.comm.agree.is_checked()


def test_ranks_fork_from_a_server_with_torch_and_see_the_launchers_environment(monkeypatch):
    """A rank starts from the fork server that imported torch once (not a new interpreter
    importing it again), yet sees the environment the launcher has *now*: one set after
    the server started reaches it, MINIDP_DEBUG's checked mode included, as under spawn."""
    child_processes()  # the server runs from here on, with the environment of this moment
    monkeypatch.setenv("MINIDP_PROBE", "set after the server started")
    monkeypatch.setenv("MINIDP_DEBUG", "DETAIL")
    before = child_processes()
    for parent, probe, checked in spawn(_where_it_started, 2, timeout=30):
        assert "multiprocessing.forkserver" in parent and "'torch'" in parent, parent
        assert (probe, checked) == ("set after the server started", True)
    assert child_processes() <= before


def test_spawn_rejects_unpicklable_functions_clearly():
    with pytest.raises(
        TypeError, match=r"fn and args must be picklable .* Hint: define fn at module"
    ):
        spawn(lambda rank, world: rank, 1)


def test_run_threads_returns_in_rank_order():
    out = run_threads(lambda rank, world: (rank, minidp.comm.get_world_size()), 5)
    assert out == [(r, 5) for r in range(5)]


def _thread_fail(rank, world):
    if rank == 2:
        raise KeyError("missing shard")
    minidp.comm.ring_all_reduce(torch.ones(8))  # peers block here until rank 2's group is aborted


def test_run_threads_failure_names_root_cause_and_bystanders_fail_fast():
    # timeout=600: if the bystanders were only freed by the timeout, the test would stall;
    # instead they must fail with PeerError (the failing rank's group is aborted at once).
    with pytest.raises(WorkerError, match=r"rank 2 raised KeyError: 'missing shard'") as info:
        run_threads(_thread_fail, 4, timeout=600)
    bystanders = info.value.failures[1:]
    assert {f.rank for f in bystanders} == {0, 1, 3}
    assert all(f.exc_type == "PeerError" for f in bystanders)
    peers = {f.rank: re.search(r"lost its connection to rank (\d+)", f.message) for f in bystanders}
    assert all(peers.values()), [f.message for f in bystanders]
    peers = {rank: int(m.group(1)) for rank, m in peers.items()}
    # whose link dropped first is a race: rank 2's own, or a bystander's that lost it first
    # (each message says "(or a rank it depends on)"); rank 2's is always among them
    assert 2 in peers.values() and all(peer != rank for rank, peer in peers.items()), peers


def test_run_threads_rejects_bad_world_size():
    with pytest.raises(ValueError, match=r"world_size must be >= 1, got 0"):
        run_threads(lambda r, w: None, 0)


def _groups_in_flight_recorder(rank, world, group=None):
    return set(pickle.loads(torch._C._distributed_c10d._dump_fr_trace())["pg_status"])


def test_thread_world_groups_are_in_torchs_flight_recorder_before_rank_code_runs():
    """torch 2.11's flight recorder adds a group to a shared map outside its lock, on the
    group's first collective; thread ranks starting their first collectives at once corrupt
    it (lost entries, now and then a segfault). ``run_threads`` (the one thread-world maker,
    the exercise checker's too) therefore starts each rank's first collective itself, one
    rank at a time: by the time any rank's code runs, all its world's groups
    are in the map. Reads torch's private dump (2.11 has it)."""
    if not FIRST_COLLECTIVE_RACES:
        pytest.skip(f"torch {torch.__version__} has no flight-recorder race to work around")
    before = _groups_in_flight_recorder(0, 1)
    seen = run_threads(_groups_in_flight_recorder, 5)
    assert all(len(s - before) == 5 for s in seen), [sorted(s - before) for s in seen]
