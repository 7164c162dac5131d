"""The sharded benchmarks run, print a verdict per pair, draw their PNG, refuse bad input.

``pytest tests/test_bench_sharded.py`` runs the input checks (no processes, instant);
``pytest tests/test_bench_sharded.py -m slow`` the ``--quick`` runs too (rank processes,
about 15-30 s each on a 2-core machine). The statistics behind the verdicts are tested
on synthetic numbers in ``tests/test_verdict.py``.
"""

from __future__ import annotations

import re
import struct

import pytest

from minidp.tools.bench import abba, fsdp, scaling, zero

FSDP2 = zero.no_fsdp2() is None
VERDICT = r"target <= \d\.\d\dx: (meets it|misses it|inconclusive) \("


@pytest.mark.slow
def test_bench_zero_quick_prints_a_verdict_and_phases_per_pair(capsys):
    assert zero.main(["--quick", "--breakdown"]) == 0
    out = capsys.readouterr().out
    labels = ["ZeRO-1 + DDP", "ZeRO-2"] if FSDP2 else ["ZeRO-1 + DDP"]
    for label in labels:
        line = next(x for x in out.splitlines() if x.startswith(f"verdict {label}:"))
        assert re.search(VERDICT, line) and "95% interval" in line and "ABBA blocks" in line
        section = out.split(f"\n{label}:\n", 1)[1]  # its phase table, torch's side first
        for phase in ("forward", "backward", "step", "total"):
            assert re.search(rf"^  {phase} +\d+\.\d +\d+\.\d   \d+\.\d\dx$", section, re.M), phase
    assert f"{'HSDP':<14} skipped: needs an even --world-size >= 4" in out  # the table's column
    assert "ZeRO-2 (reduce-scatter + all-gather)" in out  # the bytes section stays


@pytest.mark.slow
def test_bench_fsdp_quick_prints_verdict_collectives_and_phases(capsys):
    assert fsdp.main(["--quick", "--breakdown"]) == 0
    out = capsys.readouterr().out
    if FSDP2:
        line = next(x for x in out.splitlines() if x.startswith("verdict FSDP:"))
        assert re.search(VERDICT, line) and "target <= 1.05x" in line
        assert "torch FSDP2, theory                          8               4" in out
    else:
        assert "torch FSDP2 rows skipped: torch" in out
    counted = next(x for x in out.splitlines() if "minidp fully_shard, counted" in x)
    gathers, scatters = (int(v) for v in counted.split()[3:5])
    assert gathers >= 8 and scatters == 4, counted  # 4 Linear units, gathered twice
    for phase in ("forward", "backward", "step"):
        assert re.search(rf"^  {phase} +\d", out, re.M), phase


@pytest.mark.slow
def test_bench_scaling_quick_writes_a_png_and_the_table(tmp_path, capsys):
    png = tmp_path / "scaling.png"
    assert scaling.main(["--quick", "--out", str(png)]) == 0
    out = capsys.readouterr().out
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert width > 600 and height > 300  # two panels side by side
    table = out.split("MB sent/rank/step", 1)[1]
    rows = [r for r in scaling.ROWS if FSDP2 or not r.startswith("torch fsdp2")]
    for name in rows:  # one line per size (two sizes in --quick)
        lines = [x for x in table.splitlines() if re.search(rf"M  {re.escape(name)} +\d", x)]
        assert len(lines) == 2, (name, lines)
        kind = "counted" if name.startswith("minidp") else "theory"
        assert all(x.endswith(kind) for x in lines), lines
    assert f"wrote {png}" in out


@pytest.mark.parametrize(
    "bench, argv, match",
    [
        (scaling, ["--sizes", "0"], r"--sizes: expected positive millions .*got '0'"),
        (scaling, ["--sizes", "1,-4"], r"--sizes: expected positive millions .*got '1,-4'"),
        (scaling, ["--sizes", "big"], r"--sizes: expected positive millions .*got 'big'"),
        (scaling, ["--world-size", "1"], r"--world-size: expected a world size of at least 2"),
        (scaling, ["--steps", "0"], r"--steps: expected a positive integer, got '0'"),
        (zero, ["--world-size", "1"], r"--world-size: expected a world size of at least 2 .*'1'"),
        (zero, ["--breakdown-steps", "0"], r"--breakdown-steps: expected a positive integer"),
        (zero, ["--width", "wide"], r"--width: expected a positive integer, got 'wide'"),
        (zero, ["--halfwidth", "0"], r"--halfwidth: expected a fraction in \(0, 1\).*got 0.0"),
        (fsdp, ["--world-size", "0"], r"--world-size: expected a world size of at least 2 .*'0'"),
        (fsdp, ["--min-blocks", "9", "--max-blocks", "3"], r"expected 1 <= min <= max, got 9"),
        (fsdp, ["--budget", "-1"], r"--budget: expected positive seconds, got -1.0"),
    ],
)
def test_bad_input_is_a_usage_error_before_any_process_starts(bench, argv, match, capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.main(argv)
    assert exit_info.value.code == 2
    assert re.search(match, capsys.readouterr().err)


def test_phase_table_reads_medians_and_the_ratio_of_the_second_side():
    """Synthetic seconds, no clocks: medians per phase (and of the totals), minidp / torch."""
    times = {
        "torch": [[0.010, 0.020, 0.030], [0.012, 0.022, 0.032], [0.090, 0.020, 0.030]],
        "minidp": [[0.011, 0.040, 0.030], [0.013, 0.044, 0.036], [0.012, 0.042, 0.033]],
    }
    rows = {line.split()[0]: line.split()[1:] for line in abba.format_phases(times)[3:]}
    assert rows["forward"] == ["12.0", "12.0", "1.00x"]
    assert rows["backward"] == ["20.0", "42.0", "2.10x"]
    assert rows["step"] == ["30.0", "33.0", "1.10x"]
    assert rows["total"] == ["66.0", "87.0", "1.32x"]  # median of the totals, not a sum
