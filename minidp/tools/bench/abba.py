"""Timing ABBA blocks until a verdict: the loop, alone or inside a world of rank processes.

    from minidp.tools.bench.abba import abba_block, sequential
    s = sequential(lambda: abba_block(torch_step, minidp_step), "torch", "minidp", target=1.05)
    print(s.sentence())

Inside rank processes (``bench zero``, ``bench fsdp``) use :func:`run_pair`: every step
starts after a barrier, each block's four times are replaced by the slowest rank's (one
all-reduce MAX), and so every rank sees the same numbers and stops after the same block —
a rank deciding from its own clock could stop one block early and leave the others
waiting in a collective. The statistics (interval, stop rule, verdicts) live in
``verdict.py``.

Test: ``pytest tests/test_verdict.py`` (synthetic blocks, no clocks);
``pytest tests/test_bench_sharded.py`` (the benches, in rank processes).
"""

from __future__ import annotations

import argparse
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


def add_arguments(parser: argparse.ArgumentParser, budget: float) -> None:
    """The stop rule's options, shared by the benches that use :func:`run_pair`."""
    parser.add_argument(
        "--halfwidth", type=float, default=0.03, help="stop when the 95%% interval is ±this"
    )
    parser.add_argument("--min-blocks", type=int, default=5, help="ABBA blocks at least")
    parser.add_argument("--max-blocks", type=int, default=30, help="ABBA blocks at most")
    parser.add_argument(
        "--budget", type=float, default=budget, help="step seconds per pair at most"
    )


def options(args: argparse.Namespace, parser: argparse.ArgumentParser) -> dict:
    """The stop rule's keyword arguments from ``args``; a bad value is a usage error."""
    if not (0 < args.halfwidth < 1):
        parser.error(
            f"--halfwidth: expected a fraction in (0, 1) such as 0.03, got {args.halfwidth}"
        )
    if not (1 <= args.min_blocks <= args.max_blocks):
        parser.error(
            f"--min-blocks/--max-blocks: expected 1 <= min <= max, got {args.min_blocks} "
            f"and {args.max_blocks}"
        )
    if args.budget <= 0:
        parser.error(f"--budget: expected positive seconds, got {args.budget}")
    return {
        "halfwidth": args.halfwidth,
        "min_blocks": args.min_blocks,
        "max_blocks": args.max_blocks,
        "budget_s": args.budget,
    }
