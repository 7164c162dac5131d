"""The DDP and ZeRO rows of the training-loop matrix (``training_matrix.py`` explains cells).

Most cells point at ``test_matrix_ddp_zero.py``: minidp's wrapper and torch's equivalent
train side by side at 2 ranks for 3 AdamW steps with the move, ``torch.equal`` on every
parameter after every step (the runner, ``matrix_ddp_zero_runners.py``, says which torch
setup is each row's reference: for ZeRO-2's no_sync, clip and frozen-after, FSDP2). Each
row also has "combined" cases, several moves at once.

Run: ``python tests/training_matrix.py``
"""

from __future__ import annotations

from training_matrix import Cell

MATRIX = "tests/test_matrix_ddp_zero.py"


def _case(wrapper: str, move: str) -> str:
    return f"{MATRIX}::test_trains_like_torch[{wrapper}-{move}]"


def _reshard(wrapper: str) -> str:
    return f"{MATRIX}::test_checkpoint_saved_at_2_resumes_at_3_like_torch[{wrapper}]"


def _row(wrapper: str, reference: str) -> dict[str, Cell]:
    """The cells every row shares; ``reference`` names torch's side in the notes."""
    return {
        "accumulation": Cell("equal", _case(wrapper, "accumulation"), "two backwards, then step"),
        "clip_grad_norm_": Cell(
            "equal", _case(wrapper, "clip"), "clip_grad_norm_ on the module: same norm, scales"
        ),
        "LR scheduler": Cell("equal", _case(wrapper, "scheduler"), "StepLR every step"),
        "state dict round trip": Cell(
            "equal",
            _case(wrapper, "state_dict"),
            f"model + optimizer (+ scheduler) state into fresh objects == {reference} "
            "that never stopped",
        ),
        "tied weights": Cell("equal", _case(wrapper, "tied"), "head.weight is emb.weight"),
        "frozen before wrapping": Cell("equal", _case(wrapper, "frozen_before")),
        "param groups": Cell(
            "equal", _case(wrapper, "param_groups"), "norm in a 2nd group: other lr, no decay"
        ),
        "activation checkpointing": Cell(
            "equal", _case(wrapper, "checkpoint"), "checkpoint(block, use_reentrant=False)"
        ),
        "eval / no_grad between steps": Cell(
            "equal", _case(wrapper, "eval"), "eval outputs torch.equal too"
        ),
        "meta init": Cell(
            "equal", _case(wrapper, "meta"), "meta -> to_empty -> load_state_dict -> wrap"
        ),
        "dtype moves": Cell("equal", _case(wrapper, "float64"), "model.double() before wrapping"),
        "non-tensor outputs": Cell(
            "equal", _case(wrapper, "dataclass_out"), "a dataclass holding a dict and a str"
        ),
    }


DDP = {
    **_row("ddp", "torch DDP"),
    "no_sync / set_requires_gradient_sync": Cell(
        "equal",
        _case("ddp", "no_sync"),
        "first micro-batch in no_sync(); also test_ddp.py's no_sync scenarios at 2-4 ranks",
    ),
    "W→W′ resharding": Cell(
        "equal", _reshard("ddp"), "saved at 2 ranks, resumed at 3 beside torch DDP"
    ),
    "frozen after wrapping": Cell(
        "equal",
        _case("ddp", "frozen_after"),
        "with find_unused_parameters=True, like torch; without it minidp refuses where torch "
        "does (test_frozen_after_wrapping_without_find_unused_is_refused_like_torch)",
    ),
}

ZERO1 = {
    **_row("zero1", "torch DDP + ZeroRedundancyOptimizer"),
    "no_sync / set_requires_gradient_sync": Cell(
        "equal", _case("zero1", "no_sync"), "DDP's no_sync() for the first micro-batch"
    ),
    "W→W′ resharding": Cell(
        "equal", _reshard("zero1"), "consolidated state saved at 2 ranks, re-partitioned at 3"
    ),
    "frozen after wrapping": Cell(
        "equal", _case("zero1", "frozen_after"), "DDP with find_unused_parameters=True"
    ),
}

ZERO2 = {
    **_row("zero2", "torch DDP + ZeroRedundancyOptimizer"),
    "accumulation": Cell(
        "equal",
        _case("zero2", "accumulation"),
        "== torch DDP averaging each micro-batch, averages added (FSDP2's sum; "
        "test_zero2_train.py::test_accumulates_two_backwards_like_torch also vs FSDP2)",
    ),
    "no_sync / set_requires_gradient_sync": Cell(
        "equal",
        _case("zero2", "no_sync"),
        "opt.no_sync() / opt.set_requires_gradient_sync(False) vs FSDP2 "
        "reshard_after_forward=False with set_requires_gradient_sync(False)",
    ),
    "clip_grad_norm_": Cell(
        "equal",
        _case("zero2", "clip"),
        "the ordinary call on model.parameters(): each freed .grad stands in for its rows, so "
        "the norm is the global one, == FSDP2 reshard_after_forward=False (the norm's rounding "
        "is FSDP2's, not DDP's)",
    ),
    "W→W′ resharding": Cell(
        "equal",
        "tests/test_zero2_state.py::test_resume_3_to_2_ranks_matches_torch_bit_for_bit",
        "saved at 3 ranks, loaded at 2 by minidp and torch's ZeRO; 2 -> 3 within ulps",
    ),
    "frozen after wrapping": Cell(
        "equal",
        _case("zero2", "frozen_after"),
        "followed, == FSDP2 reshard_after_forward=False; with no_grad forwards between steps "
        "== torch DDP + ZeRO (find_unused_parameters=True), zero2-frozen_after_eval: FSDP2 in "
        "that mode gives the frozen parameter a gradient again after a no_grad forward "
        "(measured on 2.13, 2.14.1, 2.15.0); unfreezing a parameter frozen at construction is "
        "refused",
    ),
}

CELLS = {"DDP": DDP, "ZeRO-1 + DDP": ZERO1, "ZeRO-2": ZERO2}
