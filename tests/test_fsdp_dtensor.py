"""minidp's shards are DTensors, fixed at wrap time: torch's own APIs behave as on FSDP2.

Every test runs FSDP2 and minidp side by side in one 2-rank world (``fsdp_dtensor_runners``)
and asserts the same result, bit for bit (``torch.equal``; rows of max |diff| all 0.0), or
the same refusal. Each docstring says what main did instead.

Run: ``pytest tests/test_fsdp_dtensor.py``
"""

from __future__ import annotations

import pytest
import torch
from fsdp_dtensor_runners import (
    LARS,
    gathered_save,
    meta_recipe,
    not_elementwise,
    reshard_none,
    torch_apis,
    zero2_freed_grads,
)
from helpers import FSDP2_UNUSABLE

from minidp.launch import WorkerError, run_threads
from minidp.zero import Zero2Optimizer

needs_fsdp2 = pytest.mark.skipif(FSDP2_UNUSABLE is not None, reason=FSDP2_UNUSABLE or "")


def _unequal(rows) -> list:
    return [r for r in rows if r[-1] != 0.0]


@needs_fsdp2
@pytest.mark.parametrize("variant", ["plain", "opt_first", "unshard_first"])
def test_the_meta_device_recipe_trains_like_fsdp2(process_world, variant):
    """``fully_shard`` on a meta model, ``to_empty``, ``reset_parameters``, the optimizer
    (also built right after wrapping), train; with ``model.unshard()`` and an inner unit's
    ``unshard()`` before each forward too. main: the first forward replaced every
    parameter, so the optimizer held orphans and the losses went their own way (FSDP2
    1.1184, 2.1542, ...; minidp 1.1184, 1.3402, ...), silently; ``unshard()`` first raised."""
    for rank, r in enumerate(process_world(2).run(meta_recipe, variant)):
        theirs, ours = r["losses"]
        assert ours == theirs and theirs[0] != theirs[-1], (rank, theirs, ours)
        assert r["rows"] and _unequal(r["rows"]) == [], (rank, _unequal(r["rows"])[:5])


@pytest.fixture(scope="module")
def apis(process_world):
    if FSDP2_UNUSABLE is not None:
        pytest.skip(FSDP2_UNUSABLE)
    return process_world(2).run(torch_apis)


def test_torch_state_dict_api_full_and_sharded_is_fsdp2s(apis):
    """``get_model_state_dict``/``get_optimizer_state_dict`` with full and sharded options:
    the same tensors (full: whole; sharded: DTensors with this rank's rows) and groups.
    main: the "full" model state was each rank's plain shard — ``emb.weight`` (7, 10), not
    (13, 10) — saved without complaint, and resumed rank 0's rows on every rank."""
    for rank, r in enumerate(apis):
        assert r["full shape"] == (13, 10)
        kinds = {(what, kind) for what, _, kind, _ in r["rows"] if what in ("full", "sharded")}
        assert ("full", "Tensor") in kinds and ("sharded", "DTensor") in kinds, kinds
        assert r["full groups"] and r["sharded groups"]
        assert _unequal(r["rows"]) == [], (rank, _unequal(r["rows"])[:5])


def test_fsdp_module_placements_full_tensor_and_clip_are_fsdp2s(apis):
    """``isinstance(m, minidp.fsdp.FSDPModule)`` (the root and a block), each parameter's
    ``placements``, ``full_tensor()``, and ``clip_grad_norm_``'s global norm. main: no
    FSDPModule, no DTensor (``full_tensor`` missing), norms from hand-made subclasses."""
    for rank, r in enumerate(apis):
        assert r["isinstance"] == [True, True] and r["placements"]
        assert {what for what, *_ in r["rows"]} >= {"full_tensor", "clip"}
        assert _unequal(r["rows"]) == [], (rank, _unequal(r["rows"])[:5])


@needs_fsdp2
def test_state_dict_while_units_are_gathered_is_fsdp2s(process_world):
    """``set_reshard_after_backward(False)`` leaves units gathered; torch's
    ``get_model_state_dict`` (full and sharded) then returns the sharded parameters' state,
    as FSDP2's pre-save hooks make it. main: minidp's ``save_sharded`` refused, and its hint
    (``model.reshard()``) did not help: not recursive."""
    for rank, rows in enumerate(process_world(2).run(gathered_save)):
        assert rows and _unequal(rows) == [], (rank, _unequal(rows)[:5])


@needs_fsdp2
def test_reshard_after_forward_none_trains_like_fsdp2(process_world):
    """``reshard_after_forward=None``, the default 2.13 documents. main: a ValueError."""
    for rank, rows in enumerate(process_world(2).run(reshard_none)):
        assert rows and _unequal(rows) == [], (rank, _unequal(rows)[:5])


@needs_fsdp2
def test_optimizers_that_are_not_elementwise_behave_as_on_fsdp2(process_world):
    """Adafactor: refused by DTensor on both (the same error); a LARS-style trust ratio
    ||p|| / ||g||: global norms on both, the same weights after 3 steps. main: Adafactor
    trained 0.015-0.022 off DDP where FSDP2 refuses; LARS used ||p|| of the local shard,
    0.009-0.020 off DDP where FSDP2 is within 1.5e-8."""
    for rank, r in enumerate(process_world(2).run(not_elementwise)):
        lars = r["lars"]
        assert [o[0] for o in lars["outcomes"]] == ["ok", "ok"], lars["outcomes"]
        assert lars["outcomes"][0][1] == lars["outcomes"][1][1]  # the losses
        assert _unequal(lars["rows"]) == [], (rank, _unequal(lars["rows"])[:5])
        if "adafactor" in r:  # torch >= 2.5
            theirs, ours = r["adafactor"]["outcomes"]
            assert theirs[0] == "error" and ours == theirs, (theirs, ours)


def _zero2_with(rank, world, make):
    Zero2Optimizer(torch.nn.Linear(2, 2).parameters(), make, lr=0.1)


@pytest.mark.parametrize(
    "make", [getattr(torch.optim, "Adafactor", None), LARS], ids=["Adafactor", "LARS"]
)
def test_zero2_refuses_an_optimizer_it_cannot_shard_exactly(make):
    """ZeRO-2 steps plain rows with a whole-parameter optimizer: a norm or mean over them
    would be wrong, so it refuses at construction, before any collective. main:
    ``Zero2Optimizer(Adafactor)`` ran 0.011-0.014 off torch's ZeRO + DDP, LARS 0.011,
    silently."""
    if make is None:
        pytest.skip(f"torch {torch.__version__} has no Adafactor")
    with pytest.raises(WorkerError, match=rf"expected an optimizer that updates each element .*"
                       rf"got {make.__name__}, whose step\(\) may take norms.*Hint: use "
                       r"minidp\.fully_shard"):  # fmt: skip
        run_threads(_zero2_with, 1, make, timeout=30)


@needs_fsdp2
def test_zero2_freed_grads_take_fsdp2s_calls(process_world):
    """After backward a ZeRO-2 ``p.grad`` is this rank's reduced rows as a DTensor, as FSDP2
    ``reshard_after_forward=False``'s is: ``clone``, ``.data``, ``detach``, ``sum``,
    ``abs().max()``, ``norm(dim=1)`` give FSDP2's values, ``torch.save`` works (FSDP2's fails
    on 2.13 for a gradient at a storage offset: ``tests/test_zero2_grads.py``), and
    ``GradScaler.unscale_`` and its step
    give FSDP2's weights. ``p.grad.add_(p)`` is the one difference: ZeRO-2's ``p`` is the
    whole parameter (a plain tensor), so DTensor refuses to mix them, where FSDP2's ``p`` is
    a DTensor shard too. main: all 8 calls raised minidp's own error, and ``unscale_``'s
    hint blamed DDP."""
    for rank, r in enumerate(process_world(2).run(zero2_freed_grads)):
        for call in ("clone", ".data", "detach", "sum", "abs().max()", "norm(dim=1)",
                     "GradScaler.unscale_"):  # fmt: skip
            theirs, ours = r[call]
            assert theirs[0] == ours[0], (rank, call, theirs, ours)
            if isinstance(theirs[1], torch.Tensor):
                assert torch.equal(ours[1], theirs[1]), (rank, call)
            else:
                assert ours[1] == theirs[1], (rank, call, theirs, ours)
        assert all(
            r[c][1][0] == "ok"
            for c in ("clone", "torch.save", "sum", "norm(dim=1)", "GradScaler.unscale_")
        )
        theirs, ours = r["add_(p)"]
        assert theirs[0] == "ok" and ours[0] == "error", (theirs, ours)
        assert "mixed torch.Tensor and DTensor" in ours[1], ours
        assert r["after step"] and all(d == 0.0 for _, d in r["after step"]), r["after step"]


def _wrap_in_a_thread_world(rank: int, world: int) -> bool:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    import minidp

    minidp.fully_shard(model)
    return isinstance(next(model.parameters()), torch.Tensor)


def test_a_thread_world_says_its_shards_are_plain_tensors():
    """Thread worlds cannot hold a torch mesh: the shards stay plain, and torch's DTensor
    APIs (clip_grad_norm_'s global norm above all) would silently see one rank's rows, so
    wrapping there says so (before: nothing was said)."""
    with pytest.warns(UserWarning, match=r"clip_grad_norm_ returns this rank's norm"):
        assert run_threads(_wrap_in_a_thread_world, 2) == [True, True]
