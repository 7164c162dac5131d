"""The ``minidp`` command's own help: what a class sees before it runs anything.

Run: ``pytest tests/test_cli.py``
"""

from __future__ import annotations

from minidp.__main__ import BENCHES, DEMOS, main


def test_demo_help_lists_every_demo_with_its_options(capsys):
    assert main(["demo", "--help"]) == 0
    out = capsys.readouterr().out
    for which in DEMOS:
        assert f"minidp demo {which} " in out  # a section per demo ...
    for option in ("--numel", "--step", "--devices", "--batch", "--bucket-cap-mb"):
        assert option in out  # ... with its own options
    assert "rank processes to start (default: 2)" in out  # demo ddp's --world-size help


def test_bench_help_lists_the_benchmarks(capsys):
    assert main(["bench"]) == 0
    out = capsys.readouterr().out
    assert all(f"bench {which}" in out for which in BENCHES)
