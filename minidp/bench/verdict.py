"""A verdict from timings only when the difference is bigger than the noise.

On a shared 2-core machine one timing says little: the same comparison can flip between two
runs. So two methods are timed *interleaved* — A, B, A, B, ... — and every pair gives one
ratio ``B / A`` measured under the same momentary load. The comparison reports the median
of each, the median ratio and its spread (the middle half of the pair ratios, from the
first to the third quartile), and it names a winner only when that whole middle half lies
on one side of 1.0; otherwise it says "inconclusive on this machine".

    from minidp.bench.verdict import compare, interleave
    times = interleave({"dp": dp_step, "ddp": ddp_step}, repeats=15)   # seconds per call
    print(compare(times["dp"], times["ddp"], "DP", "DDP").sentence())

Test: ``pytest tests/test_verdict.py``
"""

from __future__ import annotations

import dataclasses
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

MIN_PAIRS = 5  # fewer interleaved pairs than this cannot show a spread worth the name


@dataclasses.dataclass(frozen=True)
class Comparison:
    """Method ``b`` timed against method ``a`` from interleaved pairs (seconds)."""

    a: str
    b: str
    median_a: float  # seconds
    median_b: float  # seconds
    ratio: float  # median of the pair ratios b / a: > 1 means b is slower
    low: float  # first quartile of the pair ratios
    high: float  # third quartile of the pair ratios
    pairs: int

    @property
    def verdict(self) -> str:
        """``"faster"`` / ``"slower"`` (said of ``b``) or ``"inconclusive"``."""
        if self.pairs < MIN_PAIRS:
            return "inconclusive"
        if self.high < 1.0:
            return "faster"
        if self.low > 1.0:
            return "slower"
        return "inconclusive"

    def sentence(self) -> str:
        """One line a learner can read: the numbers, the spread, and what they allow."""
        numbers = (
            f"{self.b} {self.median_b * 1e3:.2f} ms vs {self.a} {self.median_a * 1e3:.2f} ms: "
            f"{self.b}/{self.a} = {self.ratio:.2f}x (middle half of {self.pairs} interleaved "
            f"pairs: {self.low:.2f}-{self.high:.2f}x)"
        )
        if self.verdict == "inconclusive":
            why = f"only {self.pairs} pairs" if self.pairs < MIN_PAIRS else "the spread spans 1.0"
            return f"{numbers} -> inconclusive on this machine ({why})"
        return f"{numbers} -> {self.b} is {self.verdict} than {self.a}, beyond the spread"


def compare(a_times: Sequence[float], b_times: Sequence[float], a: str, b: str) -> Comparison:
    """Compare two equally long lists of interleaved timings (pair ``i`` ran back to back)."""
    if len(a_times) != len(b_times) or not a_times:
        raise ValueError(
            f"compare: expected two equally long, non-empty lists of interleaved timings; got "
            f"{len(a_times)} for {a!r} and {len(b_times)} for {b!r}. Hint: time them with "
            "interleave(), which runs one call of each method per repeat."
        )
    if min(*a_times, *b_times) <= 0:
        raise ValueError(
            f"compare: timings must be positive seconds; got {min(*a_times, *b_times)}"
        )
    ratios = sorted(tb / ta for ta, tb in zip(a_times, b_times))  # (pairs,)
    if len(ratios) >= 2:
        low, _, high = statistics.quantiles(ratios, n=4, method="inclusive")
    else:
        low = high = ratios[0]
    return Comparison(
        a=a,
        b=b,
        median_a=statistics.median(a_times),
        median_b=statistics.median(b_times),
        ratio=statistics.median(ratios),
        low=low,
        high=high,
        pairs=len(ratios),
    )


def interleave(
    methods: dict[str, Callable[[], object]], repeats: int, warmup: int = 1
) -> dict[str, list[float]]:
    """Call each method once per repeat, in turn; the seconds each call took, per method.

    Taking turns call by call means a burst of load from elsewhere slows every method
    alike, so the pair ratios stay meaningful while the absolute times wander.
    """
    for fn in methods.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {name: [] for name in methods}
    for _ in range(repeats):
        for name, fn in methods.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return times


def machine() -> str:
    """One line describing the hardware the numbers were measured on (a verdict's "here")."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    load = f", load average {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else ""
    return (
        f"{cpu}, {os.cpu_count()} cores{load}, torch {torch.__version__} "
        f"({torch.get_num_threads()} intra-op threads), {gpus} GPU(s), "
        f"Python {platform.python_version()}"
    )
