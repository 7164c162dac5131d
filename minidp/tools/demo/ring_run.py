"""What a recorded ring all-reduce is made of: the steps, the messages, the run.

Plain data, shared by the demo that records a run (``ring.py``: real ranks, a tapped
group, the log replayed into steps) and the code that draws it (``ring_view.py``,
``minidp/tools/diagrams/ring_steps.py``). Keeping it here lets both import it without
importing each other.

Test: ``pytest tests/test_demo_ring.py``
"""

from __future__ import annotations

import dataclasses

import torch

REDUCE_SCATTER, ALL_GATHER = "reduce-scatter", "all-gather"


@dataclasses.dataclass
class Move:
    """One message of one step: ``src`` sent chunk ``chunk`` (values ``payload``) to ``dst``."""

    src: int
    dst: int
    chunk: int
    payload: torch.Tensor


@dataclasses.dataclass
class Step:
    """One step of the ring: the messages, then what every rank holds afterwards."""

    phase: str  # REDUCE_SCATTER or ALL_GATHER
    index: int  # 0-based within the phase
    moves: list[Move]
    before: list[list[torch.Tensor]]  # [rank][chunk] values before the step
    after: list[list[torch.Tensor]]  # [rank][chunk] values after the step


@dataclasses.dataclass
class RingRun:
    """A recorded ring all-reduce: inputs, every step, results and the torch check."""

    world: int
    numel: int
    chunks: list[tuple[int, int]]
    inputs: list[torch.Tensor]
    steps: list[Step]
    outputs: list[torch.Tensor]  # the book's ring_all_reduce result, per rank
    reference: list[torch.Tensor]  # torch.distributed.all_reduce result, per rank
    data_bytes_sent: list[int]  # per rank: the chunks, as the tapped group saw them
    counted_bytes_sent: list[int]  # per rank: count_traffic's total
    events: list[dict]  # trace events (sends/receives), for a Chrome trace

    @property
    def direction(self) -> int:
        """+1 if rank r sends to rank r+1, -1 if to rank r-1 (read from the messages)."""
        m = self.steps[0].moves[0]
        return 1 if (m.dst - m.src) % self.world == 1 else -1

    @property
    def equal(self) -> bool:
        return all(torch.equal(a, b) for a, b in zip(self.outputs, self.reference))

    def grid(self, values: list[torch.Tensor]) -> list[list[torch.Tensor]]:
        """``values`` (one tensor per rank) cut into this run's chunks: ``[rank][chunk]``."""
        return chunk_grid(self.chunks, values)


def chunk_grid(chunks: list[tuple[int, int]], values: list[torch.Tensor]):
    """Cut each rank's tensor into ``chunks``: ``[rank][chunk]`` views."""
    return [[v[lo:hi] for lo, hi in chunks] for v in values]


def digits_per_rank(world: int, numel: int) -> int | None:
    """Digits each rank gets in the readable inputs, or None when they would not fit int64."""
    d = len(str(numel))
    return d if world <= 6 and world * d <= 18 else None
