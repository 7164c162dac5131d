"""Every benchmark refuses a bad argument with one line and exit 2, before any rank starts.

Each case below once ended in a traceback from deep inside a run (``--worlds 0``: a world
of no ranks; a min size above the max: an IndexError on an empty size list; ``--caps abc``:
a ValueError in a list comprehension; ``--devices 0``: a DataParallel with no devices).

Run: ``pytest tests/test_bench_args.py``
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from minidp.tools.bench import allreduce, checked, ddp, dp, scaling

CASES = [
    (allreduce, ["--worlds", "0"], r"--worlds: expected a world size of at least 2 ranks, got '0'"),
    (allreduce, ["--worlds", "2", "x"], r"--worlds: expected a world size .*got 'x'"),
    (allreduce, ["--min-size", "4096", "--max-size", "1024"], r"--min-size 4096 is above"),
    (allreduce, ["--budget", "0"], r"--budget: expected a positive number, got '0'"),
    (allreduce, ["--compute-us", "-1"], r"--compute-us: expected a number >= 0, got '-1'"),
    (allreduce, ["--loop", "0"], r"--loop: expected a positive integer, got '0'"),
    (ddp, ["--world-size", "0"], r"--world-size: expected a world size of at least 2"),
    (ddp, ["--caps", "abc"], r"--caps: expected a positive number, got 'abc'"),
    (ddp, ["--caps", "-1"], r"--caps: expected a positive number, got '-1'"),
    (ddp, ["--caps", "25,,1"], r"--caps: expected a positive number, got ''"),
    (ddp, ["--steps", "0"], r"--steps: expected a positive integer, got '0'"),
    (dp, ["--devices", "0"], r"--devices: expected a positive integer, got '0'"),
    (dp, ["--devices", "2,four"], r"--devices: expected a positive integer, got 'four'"),
    (dp, ["--intra-op-threads", "-1"], r"--intra-op-threads: expected an integer >= 0"),
    (checked, ["--sizes", "0"], r"--sizes: expected a positive integer, got '0'"),
    (scaling, ["--warmup", "-1"], r"--warmup: expected an integer >= 0, got '-1'"),
]


@pytest.mark.parametrize("bench, argv, match", CASES)
def test_bad_argument_is_one_line_and_exit_2(bench, argv, match, capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert re.search(match, err), err
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("minidp bench")


def test_the_command_line_says_it_the_same_way():
    """Through ``python -m minidp``, as a learner types it: exit 2, no traceback."""
    proc = subprocess.run(
        [sys.executable, "-m", "minidp", "bench", "ddp", "--caps", "abc"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "--caps: expected a positive number, got 'abc'" in proc.stderr


def test_good_values_still_parse():
    """The validators let the documented forms through (no run: --help exits 0)."""
    for bench in (allreduce, checked, ddp, dp, scaling):
        with pytest.raises(SystemExit) as exit_info:
            bench.main(["--help"])
        assert exit_info.value.code == 0
