"""A verdict from timings only when the difference is bigger than the noise.

On a shared 2-core machine one timing says little: the same comparison can flip between two
runs. So two methods are timed *interleaved* — A, B, A, B, ... — and every pair gives one
ratio ``B / A`` under the same momentary load; :func:`compare` reports the medians, the
median ratio and its middle half (first to third quartile of the pair ratios), and names a
winner only when that whole middle half lies on one side of 1.0 ("inconclusive on this
machine" otherwise)::

    times = interleave({"dp": dp_step, "ddp": ddp_step}, repeats=15)   # seconds per call
    print(compare(times["dp"], times["ddp"], "DP", "DDP").sentence())

Against a *target* (``minidp <= 1.05x torch``) ABBA blocks are added until the 95%
interval of the ratio is narrow (:class:`Sequential`, :func:`ratio_interval`,
:func:`stop_reason`; the loop that times the blocks is ``abba.py``), then it says meets /
misses / inconclusive.

Test: ``pytest tests/test_verdict.py``
"""

from __future__ import annotations

import dataclasses
import math
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


# ---- sequential ABBA blocks: add blocks until the interval is narrow --------------------

Block = tuple[float, float, float, float]  # seconds of A1, B1, B2, A2, in that order

# Student's t, 97.5% quantile (two-sided 95%), for 1..30 degrees of freedom: written out so
# the benches need no scipy. Beyond 30: the normal quantile with Cornish-Fisher's first
# two corrections (equal to the table at 30 to three decimals).
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)
_T975 += (2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086)
_T975 += (2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t975(df: int) -> float:
    """The 97.5% quantile of Student's t with ``df`` degrees of freedom (``df >= 1``)."""
    if df < 1:
        raise ValueError(f"t975: expected df >= 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def ratio_interval(ratios: Sequence[float]) -> tuple[float, float, float]:
    """``(ratio, low, high)``: geometric mean of the block ratios and its 95% interval.

    Why a t-interval on the *logs* of the block ratios (not a bootstrap, not the raw mean):
    a busy moment stretches a step by a factor, so the noise is multiplicative and logs
    make it additive; on the log scale B/A and A/B give mirror-image intervals. Each block
    ratio already averages two steps per side, so the mean of a handful of logs is near
    normal, and Student's t (not 1.96) keeps the interval honest at 3-10 blocks. A bootstrap
    would draw random resamples: ranks would need a shared seed, and its interval is
    unstable at so few blocks; this one is a formula of numbers every rank shares, so every
    rank computes the same bits. One disturbed block widens it (the spread grows): that
    costs more blocks or an "inconclusive", not a false verdict.
    """
    if not ratios or min(ratios) <= 0:
        raise ValueError(f"ratio_interval: expected positive block ratios, got {list(ratios)}")
    logs = [math.log(r) for r in ratios]
    mean = statistics.fmean(logs)
    if len(logs) < 2:  # one block: no spread, so no interval
        return math.exp(mean), 0.0, math.inf
    half = t975(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def stop_reason(
    ratios: Sequence[float],
    spent_s: float,
    *,
    halfwidth: float,
    min_blocks: int,
    max_blocks: int,
    budget_s: float,
) -> str | None:
    """Why to stop after these blocks (``"narrow"``, ``"max blocks"``, ``"budget"``), or None.

    It stops on the interval's *width*, never on its verdict: checking after every block
    and stopping at the first interval that clears the target ("peeking") would give far
    more than 5% false verdicts; the width does not depend on which side of the target the
    ratio lies. ``spent_s`` must be a number every rank shares (sum of shared step times).
    """
    n = len(ratios)
    if n >= max(min_blocks, 2):
        ratio, _, high = ratio_interval(ratios)
        if high / ratio - 1 <= halfwidth:  # symmetric on the log scale: ratio/low is the same
            return "narrow"
    if n >= max_blocks:
        return "max blocks"
    if n >= 2 and spent_s >= budget_s:  # two blocks at least: one has no interval at all
        return "budget"
    return None


@dataclasses.dataclass(frozen=True)
class Sequential:
    """ABBA blocks of ``b`` against ``a`` (seconds), their ratio, interval and verdicts."""

    a: str
    b: str
    blocks: tuple[Block, ...]
    target: float | None = None  # goal for b/a: "b within target x a"
    stopped: str = ""  # why the blocks stopped: "narrow", "max blocks", "budget"
    halfwidth: float = 0.03

    @property
    def ratios(self) -> list[float]:
        """Per block ``(B1 + B2) / (A1 + A2)``."""
        return [(b1 + b2) / (a1 + a2) for a1, b1, b2, a2 in self.blocks]

    @property
    def median_a(self) -> float:
        return statistics.median(t for blk in self.blocks for t in (blk[0], blk[3]))

    @property
    def median_b(self) -> float:
        return statistics.median(t for blk in self.blocks for t in (blk[1], blk[2]))

    @property
    def interval(self) -> tuple[float, float, float]:
        """``(ratio, low, high)``: see :func:`ratio_interval`."""
        return ratio_interval(self.ratios)

    @property
    def verdict(self) -> str:
        """``b`` against ``a``: ``"faster"`` / ``"slower"`` (whole interval one side of 1.0)."""
        _, low, high = self.interval
        return "faster" if high < 1.0 else "slower" if low > 1.0 else "inconclusive"

    @property
    def target_verdict(self) -> str | None:
        """``"meets"`` (whole interval <= target), ``"misses"`` (whole interval above it),
        ``"inconclusive"`` (it straddles the target); None without a target."""
        if self.target is None:
            return None
        _, low, high = self.interval
        return "meets" if high <= self.target else "misses" if low > self.target else "inconclusive"

    def sentence(self) -> str:
        ratio, low, high = self.interval
        why = {
            "narrow": f"interval within ±{self.halfwidth:.0%}",
            "max blocks": "block limit",
            "budget": "time budget",
        }.get(self.stopped, self.stopped or "not stopped")
        text = (
            f"{self.b} {self.median_b * 1e3:.1f} ms vs {self.a} {self.median_a * 1e3:.1f} ms: "
            f"{self.b}/{self.a} = {ratio:.3f}x, 95% interval {low:.3f}-{high:.3f}x "
            f"({len(self.blocks)} ABBA blocks, stopped: {why}) -> "
        )
        text += {
            "faster": f"faster than {self.a}",
            "slower": f"slower than {self.a}",
            "inconclusive": "inconclusive vs 1.0",
        }[self.verdict]
        t = self.target
        if t is not None:
            text += (
                f"; target <= {t:.2f}x: "
                + {
                    "meets": f"meets it (whole interval below {t:.2f})",
                    "misses": f"misses it (whole interval above {t:.2f})",
                    "inconclusive": f"inconclusive (interval straddles {t:.2f})",
                }[self.target_verdict]
            )
        return text
