"""The DDP, ZeRO-1 + DDP and ZeRO-2 rows of the training-loop matrix, against torch.

Each case trains the same seeded model (ranks start from different weights and see
different data) through minidp's wrapper and through torch's equivalent in the same 2-rank
gloo process, with one ordinary training-loop move — or several at once, as a real loop
does — for 3 AdamW steps, and requires every parameter to be ``torch.equal`` after every
step (``matrix_ddp_zero_runners.py`` says what each move does and which torch setup is the
reference). At 2 ranks every all-reduce / reduce-scatter element is one addition, so
bit-exactness is the honest claim; ZeRO-2's accumulation is held to the reference that
adds the micro-batch averages (``test_zero2_train.py`` explains why).

Also: a checkpoint saved at 2 ranks resumes at 3 (DDP, ZeRO-1 + DDP) equal to torch loading
the same checkpoint, and a parameter frozen after wrapping without
``find_unused_parameters`` is refused by minidp DDP exactly where torch DDP refuses it.

Run: ``pytest tests/test_matrix_ddp_zero.py``
"""

from __future__ import annotations

import pytest
import torch
from helpers import FSDP2_UNUSABLE
from matrix_ddp_zero_runners import (
    DDP_REFERENCE,
    FSDP2_MOVES,
    MAX_NORM,
    MOVES,
    frozen_after_without_find_unused,
    reshard_resume,
    reshard_save,
    run_cases,
)

CASES = {
    f"{wrapper}-{move}": (wrapper, (move,))
    for wrapper in ("ddp", "zero1", "zero2")
    for move in MOVES
}
# several moves at once, as a real loop does
CASES |= {
    "ddp-combined": ("ddp", ("no_sync", "clip", "scheduler", "tied", "frozen_before",
                             "param_groups", "checkpoint", "eval")),
    "ddp-combined_resumed": ("ddp", ("accumulation", "clip", "scheduler", "state_dict", "meta",
                                     "float64", "dataclass_out", "frozen_after")),
    "zero1-combined": ("zero1", ("accumulation", "clip", "scheduler", "tied", "frozen_before",
                                 "param_groups", "checkpoint", "state_dict", "dataclass_out")),
    "zero2-combined": ("zero2", ("accumulation", "scheduler", "tied", "frozen_before",
                                 "param_groups", "checkpoint", "eval", "state_dict")),
    # against FSDP2 (reshard_after_forward=False): the moves only it shares with ZeRO-2. Not
    # with "eval": after a no_grad forward, FSDP2 in that mode gives a parameter frozen after
    # wrapping a gradient again (test_zero2_train.py::test_frozen_after_wrapping_stays_frozen)
    "zero2-combined_fsdp2": ("zero2", ("no_sync", "clip", "frozen_after", "scheduler", "tied",
                                       "param_groups", "checkpoint", "dataclass_out")),
    # frozen after wrapping with eval forwards between steps: torch DDP + ZeRO
    # (find_unused_parameters=True) is the reference there; ZeRO-2 keeps it frozen
    "zero2-frozen_after_eval": ("zero2", ("frozen_after", "eval", "ddp_reference")),
}  # fmt: skip


def _needs_fsdp2(wrapper: str, moves: tuple) -> bool:
    """ZeRO-2's cells whose torch reference is FSDP2 (gloo reduce-scatter: torch >= 2.8)."""
    return wrapper == "zero2" and bool(set(moves) & FSDP2_MOVES) and DDP_REFERENCE not in moves


RUNNABLE = {
    key: case for key, case in CASES.items() if not (FSDP2_UNUSABLE and _needs_fsdp2(*case))
}


@pytest.fixture(scope="module")
def results(process_world):
    got = process_world(2).run(run_cases, list(RUNNABLE.values()))
    return [{key: r[case] for key, case in RUNNABLE.items()} for r in got]


@pytest.mark.parametrize("case", list(CASES))
def test_trains_like_torch(results, case):
    if case not in RUNNABLE:
        pytest.skip(FSDP2_UNUSABLE)
    wrapper, moves = CASES[case]
    for rank, res in enumerate(results):
        r = res[case]
        assert len(r["per_step"]) == 3
        assert all(d == [] for d in r["per_step"]), f"rank {rank} (param, max|diff|): {r}"
        if "clip" in moves:  # the clip really scaled, and saw the same norm as torch's
            assert all(a == b and a > MAX_NORM for a, b in r["norms"]), r["norms"]
        if "scheduler" in moves:
            assert len({tuple(lrs) for lrs in r["lrs"]}) == 3, r["lrs"]
        if "param_groups" in moves:
            assert len(r["lrs"][0]) == 2 and r["lrs"][0][0] != r["lrs"][0][1]
        if "eval" in moves:
            assert r["eval"] == [True] * 3
        if "frozen_after" in moves:
            assert not r["frozen_moved"], "a parameter frozen after wrapping was updated"
        assert r["tied"] == ("tied" in moves)
        assert r["dtype"] == str(torch.float64 if "float64" in moves else torch.float32)


@pytest.fixture(scope="module")
def resharded(process_world):
    out = {}
    for wrapper in ("ddp", "zero1"):
        saved = process_world(2).run(reshard_save, wrapper)
        out[wrapper] = (saved, process_world(3).run(reshard_resume, wrapper, saved[0]["ckpt"]))
    return out


@pytest.mark.parametrize("wrapper", ["ddp", "zero1"])
def test_checkpoint_saved_at_2_resumes_at_3_like_torch(resharded, wrapper):
    """minidp's checkpoint at 2 ranks is torch's; at 3 ranks minidp and torch both load it
    (ZeRO-1: re-partitioned over 3 owners) and stay torch.equal for 3 more steps."""
    saved, resumed = resharded[wrapper]
    for rank, r in enumerate(saved):
        assert all(d == [] for d in r["per_step"]), f"rank {rank}: {r['per_step']}"
        assert r["state_equals_torch"], f"rank {rank}: minidp's checkpoint is not torch's"
    for rank, r in enumerate(resumed):
        assert all(d == [] for d in r["per_step"]), f"rank {rank}: {r['per_step']}"
        assert r["lr"] == pytest.approx(1e-2 * 0.7**5)  # the schedule resumed too


def test_frozen_after_wrapping_without_find_unused_is_refused_like_torch(process_world):
    """torch DDP: the step after the freeze trains on un-reduced gradients (the bucket holding
    the frozen parameter never completes), the next forward raises. minidp does the same,
    with the same weights up to the refusal."""
    world = process_world(2)
    ours, theirs = (
        world.run(frozen_after_without_find_unused, "minidp"),
        world.run(frozen_after_without_find_unused, "torch"),
    )
    for a, b in zip(ours, theirs):
        assert len(a["weights"]) == len(b["weights"]) == 2
        for wa, wb in zip(a["weights"], b["weights"]):
            assert all(torch.equal(wa[k], wb[k]) for k in wb)
        prefix = "Expected to have finished reduction in the prior iteration"
        assert a["error"].startswith(prefix) and b["error"].startswith(prefix), (a, b)
