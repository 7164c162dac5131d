"""The DDP demo, benchmark smoke run, the example script (python and torchrun), thread worlds.

Run: ``pytest tests/test_ddp_misc.py``
"""

from __future__ import annotations

import copy
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from test_ddp_support import MLP

import minidp
from minidp.launch import run_threads

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "ddp_train.py"


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _check_example_output(out: str) -> None:
    assert "epoch 0: loss" in out and "epoch 2: loss" in out
    assert "replicas identical on all 2 ranks: True" in out
    assert out.count("epoch 2: loss") == 1  # printed once, by rank 0


def test_example_script_runs_with_python():
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=120, env=_env()
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    _check_example_output(proc.stdout)


# slow: minidp's DDP under a real torchrun runs in the default suite anyway, in the two
# real-style scripts of tests/test_real_scripts.py (and lesson 17's two torchrun nodes)
@pytest.mark.slow
@pytest.mark.skipif(shutil.which("torchrun") is None, reason="torchrun not on PATH")
def test_example_script_runs_unchanged_under_torchrun():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = ["torchrun", "--nproc-per-node", "2", "--master-port", str(port), str(EXAMPLE)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=_env())
    assert proc.returncode == 0, proc.stderr[-2000:]
    _check_example_output(proc.stdout)


def test_demo_shows_a_step_and_ends_with_the_parity_check(capsys):
    from minidp.tools.demo import ddp as demo

    assert demo.main(["--world-size", "2"]) == 0
    out = capsys.readouterr().out
    assert "rank 1: 0.weight[0, 0]" in out and "now rank 0's value" in out
    assert "first iteration: ONE bucket" in out and "bucket 2 (257 KiB)" in out
    lines = out.splitlines()
    ready = [i for i, line in enumerate(lines) if "grad ready" in line]
    launch0 = next(i for i, line in enumerate(lines) if "launch bucket 0" in line)
    assert ready[0] < launch0 < ready[-1]  # launches interleave with the hooks
    assert "identical on every rank: True" in out
    # buckets of 267, 257 and 257 KiB: all under all_reduce's direct limit at 2 ranks (1 MiB)
    assert "then the bucket is summed in one direct exchange: no bucket is over 1024 KiB" in out
    assert "torch.equal on all 8 parameters, per rank: [True, True]" in out
    assert "ms of all-reduce ran while backward was still running" in out


def test_demo_overlap_counts_only_all_reduce_before_backward_ends():
    from minidp.tools.demo.ddp import overlap_ms

    events = [  # microseconds; backward ends at 10 ms
        {"name": "all-reduce bucket 0", "ts": 4000.0, "dur": 8000.0},  # 6 ms before the end
        {"name": "grad ready", "ts": 5000.0},
        {"name": "wait for buckets", "ts": 10000.0},
        {"name": "all-reduce bucket 1", "ts": 12000.0, "dur": 3000.0},  # all after it
    ]
    assert overlap_ms(events) == (6.0, 11.0)


def test_bench_quick_runs(capsys):
    from minidp.tools.bench import ddp as bench

    assert bench.main(["--quick", "--caps", "1"]) == 0
    out = capsys.readouterr().out
    for row in ("torch DDP (gloo)", "minidp DDP (ring, overlap)", "no overlap", "naive", "single"):
        assert row in out
    assert "bucket_cap_mb" in out


def _thread_step(rank, world, model, xs):
    """minidp DDP in a thread world (each rank a thread with its own gloo group)."""
    ddp = minidp.DistributedDataParallel(copy.deepcopy(model), bucket_cap_mb=0.001)
    for x in xs[rank]:  # 2 steps: the second uses the rebuilt buckets
        ddp.zero_grad()
        F.mse_loss(ddp(x), torch.zeros(len(x), 4)).backward()
    return [p.grad for p in ddp.parameters()]


def _thread_reference(rank, world, model, xs):
    m = copy.deepcopy(model)
    F.mse_loss(m(xs[rank][-1]), torch.zeros(len(xs[rank][-1]), 4)).backward()
    minidp.ddp.allreduce_gradients(m)
    return [p.grad for p in m.parameters()]


def test_ddp_works_in_thread_worlds():
    """The comm thread gets the rank's group explicitly (thread-locals do not follow it).
    With 2 ranks every sum is one addition, so any layout gives the same bits."""
    torch.manual_seed(0)
    model = MLP()  # built before the threads start: they share the global RNG
    g = torch.Generator().manual_seed(1)
    xs = [[torch.randn(8, 16, generator=g) for _ in range(2)] for _ in range(2)]
    got = run_threads(_thread_step, 2, model, xs)
    want = run_threads(_thread_reference, 2, model, xs)
    for a, b in zip(got, want):
        assert all(torch.equal(x, y) for x, y in zip(a, b))


def _grad_storage(rank, world, as_view):
    torch.manual_seed(0)
    ddp = minidp.DistributedDataParallel(MLP(), gradient_as_bucket_view=as_view)
    ddp(torch.randn(4, 16)).sum().backward()
    buffers = {b.buffer.untyped_storage().data_ptr() for b in ddp.reducer.buckets}
    return [p.grad.untyped_storage().data_ptr() in buffers for p in ddp.parameters()]


def test_gradient_as_bucket_view_makes_grad_a_view_of_the_bucket():
    assert run_threads(_grad_storage, 2, True) == [[True] * 6] * 2
    assert run_threads(_grad_storage, 2, False) == [[False] * 6] * 2
