"""FSDP2's controls on minidp's ``fully_shard``, against FSDP2 on the same model.

For each control both libraries train the same seeded 4-block ``TinyLM`` at 2 ranks for 3
steps: every full parameter, shard and shard gradient is ``torch.equal`` after every step,
and both run the same number of all-gathers per step (minidp's from its trace, FSDP2's
counted around torch's all-gather). What each control changes is checked too:

* ``set_reshard_after_backward(False)`` on the first of two micro-batches: its units stay
  gathered, so the second micro-batch's forward gathers nothing — fewer all-gathers;
* ``set_modules_to_forward_prefetch`` two units ahead: unit 3's all-gather is issued
  before unit 1's forward ends (the implicit prefetch is one ahead);
* ``unshard(async_op=True)`` then ``wait()`` before the forward: the same training.

Run: ``pytest tests/test_fsdp_controls.py``
"""

from __future__ import annotations

import pytest
import torch
from fsdp_controls_runners import (
    BLOCKS,
    controls_vs_fsdp2,
    paramless_root_gathers,
    reshard_to_vs_fsdp2,
)
from helpers import FSDP2_UNUSABLE
from test_fsdp_support import TinyLM

import minidp
from minidp.launch import WorkerError, run_threads

needs_fsdp2 = pytest.mark.skipif(bool(FSDP2_UNUSABLE), reason=FSDP2_UNUSABLE or "")
MOVES = ["plain", "reshard_after_backward", "prefetch", "unshard"]


@pytest.fixture(scope="module")
def results(process_world):
    return process_world(2).run(controls_vs_fsdp2, MOVES)


@needs_fsdp2
@pytest.mark.parametrize("move", MOVES)
def test_control_trains_like_fsdp2_with_the_same_all_gathers(results, move):
    for rank, res in enumerate(results):
        r = res[move]
        diffs = [row for row in r["rows"] if row[3] != 0.0]
        assert r["rows"] and diffs == [], f"rank {rank}: (step, param, what, |diff|): {diffs[:5]}"
        assert all(ours == theirs for ours, theirs in r["gathers"]), r["gathers"]


@needs_fsdp2
def test_reshard_after_backward_false_saves_the_next_forwards_gathers(results):
    plain = results[0]["plain"]["gathers"][1][0]  # one micro-batch: root + 2 per block
    kept = results[0]["reshard_after_backward"]["gathers"][1][0]
    assert plain == 1 + 2 * BLOCKS
    # two micro-batches: the first as plain; the second's forward finds every unit gathered
    assert kept == plain + BLOCKS, (plain, kept)


@needs_fsdp2
def test_forward_prefetch_two_ahead_issues_earlier(results):
    def issued_before_forward_ends(events, target: str, unit: str) -> bool:
        return events.index(f"issue all-gather {target}") < events.index(f"forward {unit}")

    explicit, implicit = results[0]["prefetch"]["issued"][1], results[0]["plain"]["issued"][1]
    assert issued_before_forward_ends(explicit, "unit 3", "unit 1"), explicit
    assert not issued_before_forward_ends(implicit, "unit 3", "unit 1"), implicit


@needs_fsdp2
def test_reshard_to_two_of_four_ranks_trains_like_fsdp2_and_gathers_within_two(process_world):
    """reshard_after_forward=2 at 4 ranks: each block keeps 1/2 of itself after forward and
    backward gathers it from its pair ({0, 1}, {2, 3}: FSDP2's rule) — same bits and same
    all-gathers as FSDP2, and fewer bytes than resharding to all 4 ranks."""
    for rank, r in enumerate(process_world(4).run(reshard_to_vs_fsdp2, 2)):
        diffs = [row for row in r["rows"] if row[3] != 0.0]
        assert r["rows"] and diffs == [], f"rank {rank}: (step, param, what, |diff|): {diffs[:5]}"
        assert all(ours == theirs for ours, theirs in r["gathers"]), r["gathers"]
        assert r["bytes"]["2"] < r["bytes"]["True"], r["bytes"]


def _reshard_to(rank, world, k):
    torch.manual_seed(0)
    minidp.fully_shard(TinyLM().blocks[0], reshard_after_forward=k)


def test_reshard_after_forward_int_is_refused_like_fsdp2():
    with pytest.raises(WorkerError, match=r"it should be a factor of 2, not 3"):
        run_threads(_reshard_to, 2, 3, timeout=30)
    with pytest.raises(WorkerError, match=r"should be a bool or an int .* not 2.0"):
        run_threads(_reshard_to, 2, 2.0, timeout=30)


def _bad_control(rank, world, what):
    torch.manual_seed(0)
    model = TinyLM()
    for block in model.blocks:
        minidp.fully_shard(block)
    minidp.fully_shard(model)
    if what == "prefetch_not_a_unit":
        model.blocks[0].set_modules_to_forward_prefetch([model.head])
    elif what == "prefetch_not_a_list":
        model.blocks[0].set_modules_to_backward_prefetch(model.blocks[1])
    elif what == "flag":
        model.set_reshard_after_backward("no")


@pytest.mark.parametrize(
    "what, error, pattern",
    [
        ("prefetch_not_a_unit", ValueError, r"expected modules wrapped with fully_shard, got Lin"),
        ("prefetch_not_a_list", TypeError, r"expected a list of modules, got FSDPBlock"),
        ("flag", TypeError, r"set_reshard_after_backward: expected True or False, got 'no'"),
    ],
)
def test_bad_control_is_a_clear_error(what, error, pattern):
    with pytest.raises(WorkerError, match=pattern):
        run_threads(_bad_control, 2, what, timeout=30)


@needs_fsdp2
def test_a_root_without_parameters_gathers_nothing_like_fsdp2(process_world):
    """Every Linear its own unit, the root holding none: FSDP2 makes no all-gather for the
    root, and neither does minidp (it once ran an empty one, header check included)."""
    for per_step in process_world(2).run(paramless_root_gathers):
        for ours, theirs, same_loss in per_step:
            assert (ours, theirs) == (4, 4) and same_loss, per_step
