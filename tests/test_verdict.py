"""The timing verdict: a winner only beyond the spread, "inconclusive" within it.

Fed-in timings (no clocks), so each case is exact: ``pytest tests/test_verdict.py``.
The sequential ABBA verdict is fed seeded synthetic blocks: known ratios, known noise.
"""

from __future__ import annotations

import math
import random

import pytest

from minidp.tools.bench.abba import abba_block, sequential
from minidp.tools.bench.verdict import MIN_PAIRS, compare, interleave, ratio_interval, t975


def test_clear_difference_names_the_winner():
    a = [10.0, 11.0, 9.0, 10.0, 12.0, 10.0]
    b = [5.0, 5.5, 4.5, 5.0, 6.0, 5.0]  # every pair: b takes half of a's time
    c = compare(a, b, "DP", "DDP")
    assert (c.ratio, c.low, c.high, c.pairs) == (0.5, 0.5, 0.5, 6)
    assert c.verdict == "faster"
    assert "DDP is faster than DP, beyond the spread" in c.sentence()
    assert compare(b, a, "DDP", "DP").verdict == "slower"


def test_run_to_run_flip_is_inconclusive():
    # The pattern the lessons hit: some pairs say b is twice as fast, others half as fast.
    a = [1.0] * 8
    b = [0.5, 2.0, 0.6, 1.9, 0.5, 2.1, 1.0, 1.0]
    c = compare(a, b, "one thread", "torch DDP")
    assert c.low < 1.0 < c.high
    assert c.verdict == "inconclusive"
    assert c.sentence().endswith("inconclusive on this machine (the spread spans 1.0)")


def test_a_small_shift_inside_the_noise_is_inconclusive():
    a = [1.00, 1.00, 1.00, 1.00, 1.00, 1.00]
    b = [0.97, 1.02, 0.98, 1.03, 0.96, 0.99]  # median 0.985: "faster" on the median alone
    c = compare(a, b, "torch", "minidp")
    assert c.ratio < 1.0 and c.verdict == "inconclusive"


def test_one_outlier_does_not_decide_or_block():
    a = [1.0] * 7
    b = [1.2, 1.25, 1.2, 0.3, 1.22, 1.21, 1.2]  # one disturbed pair
    assert compare(a, b, "torch", "minidp").verdict == "slower"


def test_too_few_pairs_is_inconclusive_even_when_consistent():
    n = MIN_PAIRS - 1
    c = compare([1.0] * n, [2.0] * n, "a", "b")
    assert c.verdict == "inconclusive"
    assert f"only {n} pairs" in c.sentence()


@pytest.mark.parametrize(
    "a, b, match",
    [
        ([1.0, 1.0], [1.0], r"expected two equally long, non-empty lists .* got 2 for 'a' and 1"),
        ([], [], r"got 0 for 'a' and 0 for 'b'. Hint: time them with interleave"),
        ([1.0, 0.0], [1.0, 1.0], r"timings must be positive seconds; got 0.0"),
    ],
)
def test_bad_timings_are_refused(a, b, match):
    with pytest.raises(ValueError, match=match):
        compare(a, b, "a", "b")


def test_interleave_takes_turns_and_warms_up():
    calls: list[str] = []
    times = interleave({"x": lambda: calls.append("x"), "y": lambda: calls.append("y")}, 3)
    assert calls == ["x", "y"] + ["x", "y"] * 3  # one warm-up each, then strict turns
    assert [len(t) for t in times.values()] == [3, 3]
    assert all(t >= 0 for t in times["x"] + times["y"])


# ---- sequential ABBA blocks ------------------------------------------------------------


def synthetic(ratio: float, noise: float, seed: int):
    """measure_block(): A ~ 0.1 s, B ~ ``ratio`` x that, each step times a lognormal factor."""
    rng = random.Random(seed)

    def block():
        a1, b1, b2, a2 = (0.1 * m * math.exp(rng.gauss(0, noise)) for m in (1, ratio, ratio, 1))
        return a1, b1, b2, a2

    return block


def test_t_quantiles_match_the_table_and_join_it_smoothly():
    assert t975(1) == 12.706 and t975(5) == 2.571 and t975(30) == 2.042
    assert abs(t975(31) - 2.040) < 2e-3 and abs(t975(120) - 1.980) < 2e-3
    with pytest.raises(ValueError, match="expected df >= 1, got 0"):
        t975(0)


def test_interval_is_the_t_interval_of_the_log_ratios():
    assert ratio_interval([1.1, 1.1, 1.1]) == pytest.approx((1.1, 1.1, 1.1))
    r, low, high = ratio_interval([0.5, 2.0])  # logs -ln2, +ln2: mean 0, sd ln2*sqrt(2)
    half = 12.706 * math.log(2) * math.sqrt(2) / math.sqrt(2)
    assert (r, low, high) == pytest.approx((1.0, math.exp(-half), math.exp(half)))
    assert ratio_interval([1.3]) == (pytest.approx(1.3), 0.0, math.inf)  # one block: no interval


def test_clearly_slower_b_misses_the_target():
    s = sequential(synthetic(1.20, 0.05, seed=1), "torch", "minidp", target=1.05)
    ratio, low, high = s.interval
    assert s.stopped == "narrow" and high / ratio - 1 <= 0.03 and len(s.blocks) > 5
    assert 1.05 < low < 1.20 < high < 1.3
    assert (s.verdict, s.target_verdict) == ("slower", "misses")
    assert "misses it (whole interval above 1.05)" in s.sentence()


def test_clearly_faster_b_meets_the_target():
    s = sequential(synthetic(0.90, 0.05, seed=2), "torch", "minidp", target=1.05)
    assert s.interval[2] < 1.0 and s.stopped == "narrow"
    assert (s.verdict, s.target_verdict) == ("faster", "meets")
    assert "meets it (whole interval below 1.05)" in s.sentence()


def test_a_ratio_on_the_target_is_inconclusive():
    s = sequential(synthetic(1.05, 0.05, seed=3), "torch", "minidp", target=1.05)
    assert s.interval[1] < 1.05 < s.interval[2]
    assert s.target_verdict == "inconclusive" and "straddles 1.05" in s.sentence()


def test_identical_methods_are_inconclusive_against_one():
    s = sequential(synthetic(1.0, 0.05, seed=4), "a", "b", target=1.0)
    assert (s.verdict, s.target_verdict) == ("inconclusive", "inconclusive")
    # and it is the interval's doing, not luck: over 200 seeds about 5% false verdicts (95%
    # intervals; stopping on the width, not on the verdict, keeps it there): 10 here
    wrong = sum(
        sequential(synthetic(1.0, 0.05, seed), "a", "b").verdict != "inconclusive"
        for seed in range(100, 300)
    )
    assert wrong <= 16, wrong


def test_stops_at_the_time_budget():
    # noise far too big for +-3%: only the budget stops it; blocks of ~0.4 s, budget 3 s
    s = sequential(synthetic(1.0, 0.5, seed=5), "a", "b", budget_s=3.0, max_blocks=100)
    assert s.stopped == "budget"
    spent = [sum(map(sum, s.blocks[:n])) for n in range(1, len(s.blocks) + 1)]
    assert (
        spent[-1] >= 3.0 > spent[-2] and len(s.blocks) > 5
    )  # the first block that reached the budget
    assert "stopped: time budget" in s.sentence()


def test_stops_at_the_block_limit_and_never_before_min_blocks():
    s = sequential(synthetic(1.0, 0.5, seed=6), "a", "b", max_blocks=7, budget_s=1e9)
    assert (s.stopped, len(s.blocks)) == ("max blocks", 7)
    steady = sequential(lambda: (1.0, 1.2, 1.2, 1.0), "a", "b", min_blocks=5)
    assert (steady.stopped, len(steady.blocks)) == ("narrow", 5)  # no noise: at min_blocks
    # the budget stops only with two blocks at least: one block has no interval
    one = sequential(lambda: (9.0, 9.0, 9.0, 9.0), "a", "b", budget_s=1.0)
    assert (one.stopped, len(one.blocks)) == ("budget", 2)


def test_abba_order_cancels_a_steady_drift():
    # A fake clock in which every step takes 1 s more than the one before (a load rising
    # steadily): identical methods must come out equal; alternating A, B would not.
    now, calls = [0.0], []
    length = iter(range(1, 100))

    def step(name):
        calls.append(name)
        now[0] += next(length)

    block = abba_block(lambda: step("a"), lambda: step("b"), clock=lambda: now[0])
    assert calls == ["a", "b", "b", "a"] and block == (1.0, 2.0, 3.0, 4.0)
    a1, b1, b2, a2 = block
    assert (b1 + b2) / (a1 + a2) == 1.0  # ABBA: balanced
    assert b1 / a1 == 2.0  # a plain A, B pair blames the drift on B


def test_abba_block_shares_and_syncs_before_every_step():
    calls = []
    block = abba_block(
        lambda: calls.append("a"),
        lambda: calls.append("b"),
        share=lambda ts: [t + 1 for t in ts],
        sync=lambda: calls.append("|"),
    )
    assert calls == ["|", "a", "|", "b", "|", "b", "|", "a"]
    assert all(t >= 1 for t in block)


@pytest.mark.parametrize(
    "kwargs, block, match",
    [
        ({"halfwidth": 0.0}, (1, 1, 1, 1), r"expected 0 < halfwidth < 1.*got halfwidth=0.0"),
        ({"min_blocks": 9, "max_blocks": 3}, (1, 1, 1, 1), r"min_blocks=9, max_blocks=3"),
        ({}, (1.0, 1.0, 1.0), r"return 4 positive seconds .*got \(1.0, 1.0, 1.0\). Hint"),
        ({}, (1.0, 0.0, 1.0, 1.0), r"4 positive seconds"),
    ],
)
def test_bad_sequential_input_is_refused(kwargs, block, match):
    with pytest.raises(ValueError, match=match):
        sequential(lambda: block, "a", "b", **kwargs)
