"""Timing ABBA blocks until a verdict: the loop, alone or inside a world of rank processes.

    from minidp.tools.bench.abba import abba_block, sequential
    s = sequential(lambda: abba_block(torch_step, minidp_step), "torch", "minidp", target=1.05)
    print(s.sentence())      # ratio, 95% interval, blocks, verdict vs 1.0 and vs the target

A, B, B, A: ``ratio = (B1 + B2) / (A1 + A2)``, which a load rising or falling steadily
through the block does not tilt. Inside rank processes use :func:`run_pair`: every step
after a barrier, each block's times the slowest rank's (all-reduce MAX), so every rank
sees the same numbers and stops after the same block (a rank deciding from its own clock
could leave the others waiting in a collective). The statistics live in ``verdict.py``.
Where a gap is (``--breakdown``): :func:`take_turns` times forward (with ``zero_grad`` and
the loss), backward and the optimizer step apart, the sides taking turns; communication
lands in the phase whose call waits for it (DDP's all-reduce in backward, ZeRO's
broadcast or all-gather in the step, FSDP's all-gathers in forward and backward).

Test: ``pytest tests/test_verdict.py`` (synthetic blocks, no clocks);
``pytest tests/test_bench_sharded.py`` (the benches, in rank processes; the phase table).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist
from torch import nn

from minidp.tools.bench.verdict import Block, Sequential, stop_reason


def abba_block(
    step_a: Callable[[], object],
    step_b: Callable[[], object],
    share: Callable[[list[float]], Sequence[float]] | None = None,
    sync: Callable[[], object] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> Block:
    """Time one A, B, B, A block (seconds each). ``sync()`` runs before each step, untimed
    (a barrier: every rank starts the step together); ``share`` maps the four local times
    to shared ones (:func:`slowest_rank`)."""
    times = []
    for fn in (step_a, step_b, step_b, step_a):
        if sync is not None:
            sync()
        t0 = clock()
        fn()
        times.append(clock() - t0)
    a1, b1, b2, a2 = share(times) if share is not None else times
    return (float(a1), float(b1), float(b2), float(a2))


def sequential(
    measure_block: Callable[[], Sequence[float]],
    a: str,
    b: str,
    *,
    target: float | None = None,
    halfwidth: float = 0.03,
    min_blocks: int = 5,
    max_blocks: int = 40,
    budget_s: float = 60.0,
    on_block: Callable[[Sequential], None] | None = None,
) -> Sequential:
    """Add blocks (``measure_block()`` -> A1, B1, B2, A2 seconds) until ``stop_reason`` says.

    ``budget_s`` is counted in the blocks' own step seconds — numbers every rank shares —
    not on a wall clock, which differs from rank to rank.
    """
    if not (0 < halfwidth < 1 and 1 <= min_blocks <= max_blocks and budget_s > 0):
        raise ValueError(
            f"sequential: expected 0 < halfwidth < 1, 1 <= min_blocks <= max_blocks and "
            f"budget_s > 0; got halfwidth={halfwidth}, min_blocks={min_blocks}, "
            f"max_blocks={max_blocks}, budget_s={budget_s}"
        )
    blocks: list[Block] = []
    spent = 0.0
    while True:
        block = tuple(float(t) for t in measure_block())
        if len(block) != 4 or min(block) <= 0:
            raise ValueError(
                f"sequential: expected measure_block() to return 4 positive seconds "
                f"(A1, B1, B2, A2), got {block}. Hint: use abba_block(step_a, step_b)"
            )
        blocks.append(block)  # type: ignore[arg-type]
        spent += sum(block)
        ratios = [(b1 + b2) / (a1 + a2) for a1, b1, b2, a2 in blocks]
        reason = stop_reason(
            ratios,
            spent,
            halfwidth=halfwidth,
            min_blocks=min_blocks,
            max_blocks=max_blocks,
            budget_s=budget_s,
        )
        result = Sequential(a, b, tuple(blocks), target, reason or "", halfwidth)
        if on_block is not None:
            on_block(result)
        if reason is not None:
            return result


# ---- inside rank processes ------------------------------------------------------------


def slowest_rank(times: list[float]) -> list[float]:
    """Each time replaced by the largest any rank measured (all-reduce MAX): a step is done
    when every rank is, and MAX is exact, so every rank gets the same bits."""
    t = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def train_step(net: nn.Module, opt, x: torch.Tensor, y: torch.Tensor) -> Callable[[], None]:
    """A step function: zero_grad, forward, cross-entropy, backward, optimizer step."""

    def step() -> None:
        opt.zero_grad()
        nn.functional.cross_entropy(net(x), y).backward()
        opt.step()

    return step


def run_pair(
    rank: int,
    step_a: Callable[[], object],
    step_b: Callable[[], object],
    a: str,
    b: str,
    target: float | None,
    options: dict,
    warmup: int = 2,
) -> Sequential:
    """Warm both up, then :func:`sequential` with barriers and slowest-rank times; rank 0
    prints one progress line per block."""
    for _ in range(warmup):
        step_a()
        step_b()

    def progress(s: Sequential) -> None:
        if rank == 0:
            ratio, low, high = s.interval
            print(
                f"  [{b} vs {a}] block {len(s.blocks)}: {s.ratios[-1]:.3f}x; "
                f"so far {ratio:.3f}x ({low:.3f}-{high:.3f})",
                flush=True,
            )

    def measure() -> Block:
        return abba_block(step_a, step_b, share=slowest_rank, sync=dist.barrier)

    return sequential(measure, a, b, target=target, on_block=progress, **options)


# ---- a step split into its phases: where a gap is ----------------------------------------

PHASES = ("forward", "backward", "step")


def time_phases(net: nn.Module, opt, x, y) -> list[float]:
    """One step, its three phases' seconds (after a barrier, so ranks start together)."""
    dist.barrier()
    t0 = time.perf_counter()
    opt.zero_grad()
    loss = nn.functional.cross_entropy(net(x), y)
    t1 = time.perf_counter()
    loss.backward()
    t2 = time.perf_counter()
    opt.step()
    return [t1 - t0, t2 - t1, time.perf_counter() - t2]


def take_turns(sides: dict[str, tuple], x, y, steps: int) -> dict[str, list[list[float]]]:
    """``{name: [[forward, backward, step] per step]}`` at the slowest rank, for
    ``sides = {name: (net, opt)}``, one step of each side in turn, ``steps`` times."""
    times: dict[str, list[list[float]]] = {name: [] for name in sides}
    for _ in range(steps):
        for name, (net, opt) in sides.items():
            times[name].append(slowest_rank(time_phases(net, opt, x, y)))
    return times


def format_phases(times: dict[str, list[list[float]]], indent: str = "  ") -> list[str]:
    """Lines of a table: one row per phase, median ms per side, and the second side's over
    the first's where there are two (torch's first, minidp's second)."""
    sides = list(times)
    steps = len(times[sides[0]])
    lines = [
        f"{indent}phases, median ms at the slowest rank ({steps} steps each, sides taking turns;",
        f"{indent}  forward includes zero_grad and the loss):",
        f"{indent}{'phase':<10}"
        + "".join(f"{n:>24}" for n in sides)
        + ("   ratio" if len(sides) == 2 else ""),
    ]
    for i, phase in enumerate((*PHASES, "total")):
        if phase == "total":
            med = [statistics.median(sum(t) for t in times[n]) * 1e3 for n in sides]
        else:
            med = [statistics.median(t[i] for t in times[n]) * 1e3 for n in sides]
        ratio = f"   {med[1] / med[0]:.2f}x" if len(med) == 2 else ""
        lines.append(f"{indent}{phase:<10}" + "".join(f"{m:>24.1f}" for m in med) + ratio)
    return lines
