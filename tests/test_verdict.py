"""The timing verdict: a winner only beyond the spread, "inconclusive" within it.

Fed-in timings (no clocks), so each case is exact: ``pytest tests/test_verdict.py``.
"""

from __future__ import annotations

import pytest

from minidp.bench.verdict import MIN_PAIRS, compare, interleave


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
