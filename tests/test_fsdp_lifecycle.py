"""An FSDP model's life: freed after ``del`` with its communication thread.

Run: ``pytest tests/test_fsdp_lifecycle.py``
"""

from __future__ import annotations

import gc
import threading
import time
import weakref

import torch
from test_fsdp_support import TinyLM, batches, loss_fn, wrap

import minidp


def _models_in_a_loop(rank, world, count: int) -> tuple[int, int]:
    """Build, train and drop ``count`` models, as a notebook cell run again and again does.
    Returns (models freed, minidp communication threads still alive 5 s later)."""
    before = {t for t in threading.enumerate()}
    refs = []
    for _ in range(count):
        model = wrap(TinyLM(), minidp.fully_shard, True, None)
        opt = torch.optim.AdamW(model.parameters())
        loss_fn(model, *batches(rank, 1)[0]).backward()
        opt.step()
        refs.append(weakref.ref(model))
        del model, opt
    gc.collect()
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:  # the pools' threads end on their own once shut down
        alive = [t for t in threading.enumerate() if t not in before and "comm" in t.name]
        if not alive:
            break
        time.sleep(0.05)
    return sum(r() is None for r in refs), len(alive)


def test_a_deleted_model_is_freed_with_its_communication_thread(process_world):
    """(In processes, not threads: concurrent gc.collect() calls skip each other.)"""
    for rank, (freed, threads) in enumerate(process_world(2).run(_models_in_a_loop, 5)):
        assert (freed, threads) == (5, 0), f"rank {rank}: {freed} of 5 freed, {threads} threads"
