"""``python -m minidp bench allreduce`` runs and prints its table (a smoke test, not a timing).

Run: ``pytest tests/test_bench_allreduce.py``
"""

from __future__ import annotations

from minidp.tools.bench import allreduce


def test_bench_allreduce_prints_rows_for_every_algorithm(capsys):
    assert allreduce.main(["--quick", "--worlds", "2", "--max-size", "16384", "--breakdown"]) == 0
    out = capsys.readouterr().out
    assert (
        "| ranks | size | algorithm | median ms | algbw GB/s | busbw GB/s | time vs gloo "
        "(middle half) |" in out
    )
    for size in ("4 KiB", "16 KiB"):
        for algo in ("gloo", "auto", "ring", "naive", "ring pass", "check"):
            assert f"| 2 | {size} | {algo} |" in out
    # gloo against itself: every pair ratio is exactly 1
    assert "| 2 | 4 KiB | gloo |" in out and "| 1.00x (1.00–1.00) |" in out
