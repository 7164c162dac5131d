"""Launchers under abuse: bad arguments, unguarded scripts, Ctrl-C, DataLoader workers in
ranks, a dead parent, ranks that never return, torchrun's timeout, the root cause.

Run: ``pytest tests/test_reliability_launch.py``

Scripts run in a fresh interpreter (``subprocess``) where the behaviour depends on how
Python was started (``python script.py``, ``python -c``, stdin, ``torchrun``).
"""

from __future__ import annotations

import inspect
import math
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from fault_cases_launch import ctrl_c_during, orphans_after_parent_killed
from fault_scripts import SCRIPTS, run_script
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from minidp.launch import ProcessWorld, WorkerError, child_processes, launch, run_threads, spawn

REPO = Path(__file__).resolve().parents[1]


def _rank(rank, world):
    return rank


# ---- bad arguments: one clear line, before anything starts ------------------------------

BAD_WORLD_SIZES = [
    ("2", TypeError, r"world_size must be an int \(the number of ranks\), got '2' \(str\) — "
     r"pass e.g. world_size=2"),
    (2.0, TypeError, r"got 2.0 \(float\) — pass e.g. world_size=2"),
    (None, TypeError, r"got None \(NoneType\)"),
    (True, TypeError, r"got True \(bool\)"),
    (0, ValueError, r"world_size must be >= 1, got 0"),
]  # fmt: skip
BAD_TIMEOUTS = [
    (0, ValueError, r"timeout must be a finite number of seconds > 0, got 0 — .*timeout=60"),
    (-5, ValueError, r"got -5"),
    (math.inf, ValueError, r"got inf — .*timeout=86400"),
    (None, TypeError, r"timeout must be a number of seconds, got None \(NoneType\)"),
    ("10", TypeError, r"got '10' \(str\) — pass e.g. timeout=60"),
]
LAUNCHERS = {
    "run_threads": lambda n, t: run_threads(_rank, n, timeout=t),
    "spawn": lambda n, t: spawn(_rank, n, timeout=t),
    "ProcessWorld": lambda n, t: ProcessWorld(n, timeout=t),
    "launch": lambda n, t: launch(_rank, n, timeout=t),
}


@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize("value, exc, pattern", BAD_WORLD_SIZES)
def test_bad_world_size_is_a_clear_error(launcher, value, exc, pattern):
    before = child_processes()
    with pytest.raises(exc, match=f"^{launcher}: .*{pattern}"):
        LAUNCHERS[launcher](value, 60)
    assert child_processes() <= before


@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize("value, exc, pattern", BAD_TIMEOUTS)
def test_bad_timeout_is_a_clear_error(launcher, value, exc, pattern):
    with pytest.raises(exc, match=f"^{launcher}: .*{pattern}"):
        LAUNCHERS[launcher](2, value)


def test_bad_deadlines_are_clear_errors(process_world):
    with pytest.raises(ValueError, match=r"^spawn: deadline must be a finite number .* got 0"):
        spawn(_rank, 2, deadline=0)
    with pytest.raises(TypeError, match=r"^ProcessWorld.run: timeout must be a number .*'5'"):
        process_world(2).run(_rank, timeout="5")


def test_every_launcher_has_the_same_timeout_parameter_and_default():
    defaults = {
        name: inspect.signature(f).parameters["timeout"].default
        for name, f in [("spawn", spawn), ("ProcessWorld", ProcessWorld),
                        ("run_threads", run_threads), ("launch", launch)]
    }  # fmt: skip
    assert set(defaults.values()) == {60.0}, defaults


# ---- scripts: a missing __main__ guard, a function that lives only in __main__ ----------
# (the scripts and how they are run: tests/fault_scripts.py, also rows of the fault catalog)


def test_script_without_main_guard_is_one_clear_line(tmp_path):
    before = child_processes()
    out = run_script("unguarded", "file", str(tmp_path))
    assert out.returncode == 1
    last = out.stderr.strip().splitlines()[-1]
    assert last == (
        "RuntimeError: spawn: called at the top level of unguarded.py (line 4) without "
        '`if __name__ == "__main__":` — every rank process re-imports the script and '
        "would start ranks again; move the call under that guard"
    )
    assert "bootstrapping" not in out.stderr  # multiprocessing's own message never comes
    assert len(out.stderr.splitlines()) < 12, out.stderr
    assert child_processes() <= before


@pytest.mark.slow  # every lesson runs as a guarded script in the default suite
def test_script_with_main_guard_runs(tmp_path):
    guarded = SCRIPTS["unguarded"].replace(
        "print(", 'if __name__ == "__main__" and True:\n    print('
    )
    (tmp_path / "train.py").write_text(guarded)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = subprocess.run(
        [sys.executable, "train.py"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert (out.returncode, out.stdout.strip()) == (0, "[0, 1]"), out.stderr


@pytest.mark.parametrize(
    "how",
    ["-c", pytest.param("stdin", marks=pytest.mark.slow)],  # stdin: same check as -c
)
def test_rank_function_from_an_interactive_main_is_a_clear_error(how, tmp_path):
    out = run_script("interactive", how, str(tmp_path))
    assert out.returncode == 1
    assert (
        out.stderr.strip()
        .splitlines()[-1]
        .startswith(
            "RuntimeError: spawn: 'main' is defined in __main__ of an interactive session "
            "(python -c, stdin or a notebook cell), which rank processes cannot import"
        )
    ), out.stderr


# ---- DataLoader workers inside rank processes; nothing survives a dead parent -----------


def _dataset() -> TensorDataset:
    return TensorDataset(torch.arange(24.0).view(12, 2))


def _loader(rank: int, world: int, workers: int) -> DataLoader:
    sampler = DistributedSampler(_dataset(), num_replicas=world, rank=rank, shuffle=False)
    # "fork": workers start at once (the default in a rank is "spawn", as under torch's
    # spawn: each worker imports torch; the fault catalog runs that case)
    context = "fork" if workers else None
    return DataLoader(
        _dataset(), batch_size=2, sampler=sampler, num_workers=workers,
        multiprocessing_context=context,
    )  # fmt: skip


def _batches_with_workers(rank, world):
    return [batch for (batch,) in _loader(rank, world, workers=2)]


def test_dataloader_with_workers_inside_rank_processes(process_world):
    """Ranks may start children (they are not daemons; a daemon may not, whatever the
    start method): the batches equal those of torch's DataLoader without workers, in
    this process."""
    got = process_world(2).run(_batches_with_workers)
    for rank, batches in enumerate(got):
        want = [batch for (batch,) in _loader(rank, 2, workers=0)]
        assert len(batches) == len(want) == 3
        assert all(torch.equal(a, b) for a, b in zip(batches, want, strict=True))


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc (Linux)")
def test_no_rank_or_child_survives_a_killed_parent(tmp_path):
    """The parent of a 1-rank world is SIGKILLed while its rank holds 2 DataLoader workers
    and a plain child process (which, unlike the workers, has no parent watchdog)."""
    pids, alive = orphans_after_parent_killed(str(tmp_path))
    assert len(pids) >= 1 + 2 + 1, pids  # the rank, its 2 (or more) workers, the sleeper
    assert alive == []


# ---- Ctrl-C in a notebook or REPL: caught, and no rank stays alive ----------------------


@pytest.mark.parametrize("during", ["start-up", "run"])
def test_ctrl_c_caught_by_the_caller_leaves_no_rank(during):
    """A real SIGINT to this process while ranks start (or run), caught like a notebook
    does: afterwards no rank process is alive. Ranks never see the signal here, and the
    held traceback keeps the world from being garbage-collected, so only the launcher's
    own clean-up can end them."""
    before = child_processes()
    caught = ctrl_c_during(during)  # held, with its traceback, as a notebook holds it
    assert isinstance(caught, KeyboardInterrupt)
    assert child_processes() <= before


@pytest.mark.slow
def test_ctrl_c_during_start_up_again_and_again_leaves_no_rank():
    """The race behind the test above, 40 times: a SIGINT landing after the fork server forked
    a rank and before its pid reached the launcher left that rank running (4 of 40 beside a
    CPU hog, before the launcher looked for it among the server's children)."""
    for _ in range(40):
        before = child_processes()
        assert isinstance(ctrl_c_during("start-up"), KeyboardInterrupt)
        assert child_processes() <= before


# ---- run_threads: a rank that never returns ---------------------------------------------


def _never_returns(rank, world, how):
    if rank == 1 and how == "spins":
        while True:
            try:
                pass
            except Exception:  # user code that swallows errors must not keep it alive
                pass
    if rank == 1 and how == "sleeps":
        time.sleep(7)  # one C call: no bytecode boundary until it returns
    return rank


def _rank_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("minidp-world")]


def test_run_threads_stops_a_rank_spinning_in_python():
    with pytest.raises(WorkerError, match=r"run_threads: rank 1 was still running at the 0.5s"):
        run_threads(_never_returns, 2, "spins", timeout=0.5)
    assert _rank_threads() == []  # stopped, not burning a core


def test_run_threads_warns_naming_a_rank_it_cannot_stop():
    with pytest.warns(RuntimeWarning, match=r"rank\(s\) \[1\] still running 4s after the 0.5s"):
        with pytest.raises(WorkerError, match=r"rank 1 was still running"):
            run_threads(_never_returns, 2, "sleeps", timeout=0.5)
    # (the stop lands when the sleep returns, as in the spinning case above)


# ---- the root cause is the first rank's own exception -----------------------------------


def _raise_in_turn(rank, world):
    if rank == 1:
        raise ValueError("rank 1 fails first")
    time.sleep(0.3)  # rank 0 fails later, with its own (not a bystander's) error
    raise KeyError("rank 0 fails second")


def test_root_cause_is_the_first_of_two_own_exceptions():
    with pytest.raises(WorkerError, match=r"^run_threads: rank 1 raised ValueError") as info:
        run_threads(_raise_in_turn, 2, timeout=60)
    assert [(f.rank, f.exc_type) for f in info.value.failures] == [
        (1, "ValueError"),
        (0, "KeyError"),
    ]


# ---- torchrun: launch() takes the same timeout ------------------------------------------


def test_launch_under_torchrun_uses_its_timeout(tmp_path):
    """With torch's default (30 min) rank 0 would wait for rank 1 and both would succeed;
    with launch(timeout=3) rank 0 gives up and names the stalled rank."""
    out = run_script("torchrun_stall", "torchrun", str(tmp_path))
    text = out.stdout + out.stderr
    assert out.returncode != 0, text
    assert "CollectiveTimeout" in text and "rank 0 timed out waiting to recv from rank 1" in text
