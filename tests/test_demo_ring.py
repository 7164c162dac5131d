"""``python -m minidp demo ring``: runs non-interactively, draws every step, matches torch.

Run: ``pytest tests/test_demo_ring.py``
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from minidp.comm import agree
from minidp.tools.demo import ring
from minidp.tools.demo.ring_view import ALL_GATHER, REDUCE_SCATTER
from minidp.tools.recorder import ring as recorder


def test_record_ring_replays_the_real_run():
    run = ring.record_ring(4, 12)
    assert run.equal
    assert len(run.steps) == 6
    assert [s.phase for s in run.steps] == [REDUCE_SCATTER] * 3 + [ALL_GATHER] * 3
    total = sum(run.inputs)
    assert torch.equal(torch.cat(run.steps[-1].after[0]), total)
    # after reduce-scatter, exactly one chunk per rank is final, a different one on each rank
    finished = {
        (r, c)
        for r in range(4)
        for c in range(4)
        if torch.equal(run.steps[2].after[r][c], run.grid([total] * 4)[r][c])
    }
    assert len(finished) == 4 and len({c for _, c in finished}) == 4
    assert run.data_bytes_sent == [2 * 3 * 96 // 4] * 4  # 2(n-1)/n * S


@pytest.mark.parametrize("world", [2, 4])
def test_the_book_s_ring_sends_only_chunks_and_the_engine_s_header_is_named(world):
    # The demo runs the page lesson 8 prints: no header, every byte counted is a chunk.
    # What the engine adds on the wire is said, sized from agree.py.
    run = ring.record_ring(world, 8)
    assert run.counted_bytes_sent == run.data_bytes_sent == [2 * (world - 1) * 64 // world] * world
    text = "\n".join(ring.render_summary(run, ring.Style(color=False, unicode=False)))
    assert f"a {agree.HEADER_BYTES}-byte header in its first message to every other rank" in text
    assert "book's ring : " in text and "via rank 0" not in text


def test_the_demo_runs_the_book_s_ring():
    """The page the learner reads, not a copy of it: the recorder's ring (which the demo, the
    classroom and ring_steps.png show) is the book's function."""
    from minidp.textbook import collectives

    assert recorder.ring_all_reduce is collectives.ring_all_reduce


@pytest.mark.parametrize("world,numel", [(2, 2), (3, 7), (5, 11)])
def test_uneven_and_small_worlds(world, numel):
    run = ring.record_ring(world, numel)
    assert run.equal and len(run.steps) == 2 * (world - 1)


def test_cli_output_and_check(capsys):
    assert ring.main(["--world-size", "4", "--numel", "8", "--color", "never"]) == 0
    out = capsys.readouterr().out
    assert "reduce-scatter, step 3 of 3 (every rank r sends to rank r-1)" in out
    assert "all-gather, step 3 of 3" in out
    assert "torch.equal: True on every rank" in out
    assert "\033[" not in out  # no colour when asked not to
    assert "[1111 2222]" in out  # chunk 0 summed over 4 ranks: one digit per rank


@pytest.mark.parametrize("world,numel", [(4, 8), (4, 12), (3, 64), (6, 99), (7, 30)])
def test_inputs_never_repeat_and_digit_groups_name_the_ranks(world, numel):
    inputs = recorder.readable_inputs(world, numel)
    values = torch.cat(inputs)
    assert len(values.unique()) == world * numel  # no chunk repeats another (--numel 12 did)
    d = recorder.digits_per_rank(world, numel)
    if d:  # element i's total reads i+1 in every d-digit group: every rank contributed
        total = sum(inputs).tolist()
        assert [str(v) for v in total] == [
            (str(i + 1).zfill(d) * world).lstrip("0") for i in range(numel)
        ]


def test_step_redraws_in_place_on_a_terminal():
    import os
    import pty

    leader, follower = pty.openpty()  # a real terminal for stdout: --step clears and redraws
    proc = subprocess.Popen(
        [sys.executable, "-m", "minidp", "demo", "ring", "--world-size", "2", "--numel", "2"]
        + ["--step", "--color", "never"],
        stdin=subprocess.PIPE,
        stdout=follower,
        stderr=subprocess.PIPE,
        env={**os.environ, "NO_COLOR": "1"},
    )
    os.close(follower)
    proc.stdin.write(b"\n" * 4)
    proc.stdin.close()
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:  # the demo exited: the terminal closed
            break
        if not data:
            break
        chunks.append(data)
    assert proc.wait(timeout=120) == 0, proc.stderr.read()
    out = b"".join(chunks).decode()
    assert out.count(ring.CLEAR_SCREEN) == 2  # one redraw per step (2 steps on 2 ranks)
    assert "torch.equal: True on every rank" in out


def test_cli_colour_and_trace(tmp_path, capsys):
    path = tmp_path / "ring.json"
    assert (
        ring.main(["--world-size", "3", "--numel", "6", "--color", "always", "--trace", str(path)])
        == 0
    )
    assert "\033[" in capsys.readouterr().out
    data = json.loads(path.read_text())
    assert {e["pid"] for e in data["traceEvents"]} == {0, 1, 2}


def test_bad_arguments_are_explained(capsys):
    with pytest.raises(SystemExit):
        ring.main(["--world-size", "1"])
    assert "at least 2" in capsys.readouterr().err


def test_step_mode_as_a_subprocess():
    # --step waits for Enter: feed it newlines; NO_COLOR respected; the module entry point works
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "minidp",
            "demo",
            "ring",
            "--world-size",
            "3",
            "--numel",
            "6",
            "--step",
        ],
        input="\n" * 10,
        capture_output=True,
        text=True,
        timeout=120,
        env={**__import__("os").environ, "NO_COLOR": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("(Enter: next step)") == 4
    assert "torch.equal: True on every rank" in proc.stdout
    assert "\033[" not in proc.stdout


def test_plain_ascii_terminal():
    """A terminal that cannot print Unicode gets ASCII arrows and dashes, not a crash."""
    env = {**__import__("os").environ, "PYTHONIOENCODING": "ascii", "NO_COLOR": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "minidp", "demo", "ring", "--world-size", "3", "--numel", "6"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "torch.equal: True on every rank" in proc.stdout
    assert "<--" in proc.stdout and "—" not in proc.stdout
