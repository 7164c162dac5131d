"""Uneven inputs: ranks that run out of batches *shadow* the collectives of the others.

The problem: every DDP iteration is a fixed sequence of collectives (bucket all-reduces,
buffer broadcasts). If rank 1 has 10 batches and rank 0 has 9, rank 1's tenth backward
waits for rank 0's all-reduce forever.

The fix (torch's ``Join``): around the training loop, ``with ddp.join(): ...``. Every
forward of a rank still training first all-reduces a ``1`` ("I am here"). A rank whose
loop has ended enters ``__exit__`` and repeats, until that count is 0:

    all-reduce 0 (answers the "I am here"s: their sum = ranks still training)
    rebuild buckets if due, broadcast buffers (from the highest rank still training)
    all-reduce 0 (answers "will you sync this backward?")
    all-reduce a zero bucket for every bucket, in order (the others' backward)

Zeros change no sum, so the ranks still training see the average of their own gradients,
divided by the *initial* world size (or, with ``divide_by_initial_world_size=False``, by
the number of ranks still training). At the end the last rank to join broadcasts its
parameters, so every replica ends identical. ``throw_on_early_termination=True``: the
first rank to run out makes every rank raise instead.

Test: ``pytest tests/test_ddp_join.py``
"""

from __future__ import annotations

import torch

from minidp.comm import all_reduce


class Join:
    """Context manager for training one minidp DDP on uneven inputs (see module docstring).

    Args:
        ddp: the ``minidp.DistributedDataParallel`` being trained.
        divide_by_initial_world_size: keep dividing gradients by the initial world size
            (every sample weighs the same), or by the ranks still training.
        enable: ``False`` makes the context do nothing (inputs known to be even).
        throw_on_early_termination: raise on every rank as soon as one runs out.
    """

    def __init__(
        self,
        ddp,
        divide_by_initial_world_size: bool = True,
        enable: bool = True,
        throw_on_early_termination: bool = False,
    ) -> None:
        self.ddp = ddp
        self.divide_by_initial = divide_by_initial_world_size
        self.enable = enable
        self.throw = throw_on_early_termination
        self.group = ddp.process_group
        self.rank = self.group.rank()

    def __enter__(self) -> Join:
        if self.enable:
            self.ddp._join = self
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if not self.enable or exc_type is not None:
                return  # an exception propagates as it is
            is_last_joiner = True
            while True:
                if self._sum(0.0) == 0:  # nobody is training any more
                    break
                if self.throw:
                    self._sum(1.0)  # answers their "did anyone run out?"
                    raise RuntimeError(f"Rank {self.rank} exhausted all inputs.")
                self._shadow_iteration()
                is_last_joiner = False
            self._sync_final_model(is_last_joiner)
        finally:
            self.ddp._join = None

    # ---- called by a rank still training, from DDP.forward -----------------------------

    def notify(self) -> None:
        """Say "I am still training"; the sum tells how many are (the divisor option)."""
        count = self._sum(1.0)
        if self.throw and self._sum(0.0) > 0:
            raise RuntimeError(
                "Detected at least one rank that exhausted inputs. Throwing across all ranks."
            )
        if not self.divide_by_initial:
            self.ddp.reducer.div_factor = int(count)

    def announce_sync(self, will_sync: bool) -> None:
        """Tell joined ranks whether this iteration's backward all-reduces."""
        self._sum(1.0 if will_sync else 0.0)

    def common_rank(self, candidate: bool) -> int:
        """The highest rank among the candidates (buffers come from a rank still training)."""
        t = torch.tensor([self.rank if candidate else -1], dtype=torch.int64)
        all_reduce(t, "max", self.group)
        if int(t) < 0:
            raise RuntimeError("Join: no rank qualified as the source — a minidp bug")
        return int(t)

    # ---- the joined rank's side ---------------------------------------------------------

    def _sum(self, value: float) -> float:
        t = torch.tensor([value])
        all_reduce(t, "sum", self.group)
        return float(t)

    def _shadow_iteration(self) -> None:
        ddp = self.ddp
        ddp.reducer.prepare_for_forward()  # a rebuild, if due, broadcasts: take part
        if ddp.require_forward_param_sync and ddp.broadcast_buffers and ddp._buffers_list():
            ddp._sync_buffers(self.common_rank(False))
        will_sync = self._sum(0.0) != 0
        ddp.require_forward_param_sync = will_sync
        if will_sync:
            ddp.reducer.shadow_backward()

    def _sync_final_model(self, is_last_joiner: bool) -> None:
        """Every rank takes the parameters (and buffers) of the last rank to join."""
        src = self.common_rank(is_last_joiner)
        states = [p.detach() for p in self.ddp.module.parameters()]
        if self.ddp.broadcast_buffers:
            states += [b.detach() for b in self.ddp._buffers_list()]
        self.ddp._broadcast_coalesced(states, src)
