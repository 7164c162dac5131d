"""Measure the link the recording ran on: latency α and bandwidth β, by ping-pong.

    python -m minidp classroom --no-serve --only ring --out /tmp/cls

Lesson 6's measurement and fit, in the same rank processes as the scenes: ranks 0 and 1
bounce one message of each size back and forth (``minidp.comm.p2p`` send/recv: plain
messages, no collective's check), and the best round trip of several, halved, is the
one-way time. The fit is lesson 6's: α is the smallest message's one-way time, β the extra
bytes of the largest message over its extra time, so a message of n bytes is modelled as
``α + n / β``. The page's modelled times (every one labelled as a model) use these two
numbers, and show the samples they came from.

Test: ``pytest tests/test_classroom.py -k alpha``
"""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist

from minidp import trace
from minidp.comm import group as groups
from minidp.comm import p2p

LANE = "classroom"
SIZES = (8, 64, 512, 4096, 32768, 262144, 1048576)  # bytes per message
REPEATS = 7  # round trips per size; the best one counts (the least disturbed)


def _ping_pong(rank: int, world: int) -> list[tuple[int, float]] | None:
    g = groups.resolve()
    samples = []
    for nbytes in SIZES:
        buf = torch.zeros(nbytes // 4)
        dist.barrier(group=g)
        if rank > 1:
            continue
        best = float("inf")
        for _ in range(REPEATS):
            t0 = time.perf_counter()
            if rank == 0:
                p2p.send(buf, 1, g)
                p2p.recv(buf, 1, g)
            else:
                p2p.recv(buf, 0, g)
                p2p.send(buf, 0, g)
            best = min(best, time.perf_counter() - t0)
        samples.append((nbytes, best / 2 * 1e6))  # one way, microseconds
    dist.barrier(group=g)
    return samples if rank == 0 else None


def fit(samples: list[tuple[int, float]]) -> tuple[float, float | None]:
    """Lesson 6's fit: (α in µs, β in bytes per µs), β None when the largest message took
    no longer than the smallest (noise: no bandwidth to read)."""
    small, big = min(samples), max(samples)
    alpha = small[1]
    extra = big[1] - alpha
    return alpha, ((big[0] - small[0]) / extra if extra > 0 else None)


def link_events(world) -> list[dict]:
    """One ``link alpha-beta`` event on rank 0: the samples and lesson 6's fit of them."""
    samples = world.run(_ping_pong, timeout=120.0)[0]
    alpha, beta = fit(samples)
    args = {"samples": samples, "alpha_us": alpha, "beta_bytes_per_us": beta,
            "between": f"rank processes 0 and 1 of {world.world_size}, gloo",
            "repeats": REPEATS, "cpus": os.cpu_count()}  # fmt: skip
    return [{"name": "link alpha-beta", "ph": "i", "s": "t", "ts": trace.now_us(), "pid": 0,
             "tid": LANE, "args": args}]  # fmt: skip
