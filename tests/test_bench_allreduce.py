"""``python -m minidp bench allreduce`` runs and prints its table (a smoke test, not a timing).

Run: ``pytest tests/test_bench_allreduce.py``
"""

from __future__ import annotations

import re

from minidp.tools.bench import allreduce


def test_bench_allreduce_prints_rows_the_checks_cost_and_the_goals(capsys):
    argv = ["--quick", "--worlds", "2", "--min-size", "16384", "--max-size", "16384"]
    assert allreduce.main([*argv, "--breakdown", "--loop", "20", "--compute-us", "50"]) == 0
    out = capsys.readouterr().out
    assert (
        "| ranks | size | algorithm | median ms | algbw GB/s | busbw GB/s | time vs gloo "
        "(middle half) | check µs per call (middle half) | check share |" in out
    )
    for algo in ("gloo", "auto", "ring", "naive", "ring pass", "direct pass"):
        assert f"| 2 | 16 KiB | {algo} |" in out
    # gloo against itself: every pair ratio is exactly 1, and it has no check
    assert "| 2 | 16 KiB | gloo |" in out and "| 1.00x (1.00–1.00) | — | — |" in out
    # the checked all-reduces: the check's µs per call with its middle half, and its share
    cost = r"[+-]\d+ \([+-]\d+ to [+-]\d+\) \| -?\d+% \|"
    for algo in ("auto", "ring"):
        assert re.search(rf"\| 2 \| 16 KiB \| {algo} \|.*\| {cost}", out)
    assert re.search(
        r"2 ranks, 16 KiB: all_reduce \d+\.\d+x gloo \(.*\), goal <= 1\.6x: "
        r"(meets it|misses it|inconclusive on this machine).*; the check [+-]\d+ ",
        out,
    )
    # --loop: gloo's and minidp's calls in blocks, with compute between them
    assert "in a loop: 20 calls per block, 50 µs of compute between calls (µs per" in out
    assert re.search(r"\| 2 \| 16 KiB \| \d+ \| \d+ \| \d+\.\d\dx \(\d+\.\d\d–\d+\.\d\d\) \|", out)
