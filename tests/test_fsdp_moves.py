"""minidp's ``fully_shard`` against FSDP2 on the moves torch's own FSDP2 tests make.

torch's test files for FSDP2 (test_fully_shard_{init,state_dict,clip_grad_norm_,frozen,
mixed_precision,training}.py) check behaviours minidp lacked; each is here, written
minidp's way: the same seeded model wrapped by FSDP2 and by minidp in one 2-rank gloo world,
the same loop, every parameter's full tensor, shard, gradient and placements compared bit
for bit after every backward (``fsdp_moves_runners``, ``fsdp_policy_runners``). One world
launch runs them all. Each docstring says what main did instead.

Run: ``pytest tests/test_fsdp_moves.py`` (``-m slow``: also under ``torch.compile``)
"""

from __future__ import annotations

import fsdp_policy_runners  # noqa: F401 - registers part 2's scenarios
import pytest
from fsdp_moves_runners import SCENARIOS, run
from helpers import FSDP2_UNUSABLE

pytestmark = pytest.mark.skipif(FSDP2_UNUSABLE is not None, reason=FSDP2_UNUSABLE or "")

SLOW = ("compiled_aot_eager", "compiled_inductor")

MAIN = {  # scenario: what main did
    "shard_largest_dim": "refused shard_placement_fn (TypeError)",
    "shard_last_dim_per_block": "refused shard_placement_fn (TypeError)",
    "grouped_chunked_head": "refused a list of modules (TypeError)",
    "grouped_chunked_accumulate": "refused a list of modules",
    "double_partial_forward": "refused a list of modules",
    "non_root_forward_backward": "raised 'the last backward finished without gradients'",
    "unused_parameters": "raised 'the last backward finished without gradients'",
    "reset_after_exception": "had no reset_iter_state",
    "reshard_toggle": "had no set_reshard_after_forward, no fully_shard.state",
    "two_roots_chained": "trained like FSDP2 already (kept as a move of a real loop)",
    "shared_submodule": "trained like FSDP2 already (a unit of its own: not compared)",
    "casts": "cast like FSDP2 already (not compared per module before)",
    "clamp_reduce_dtype": "trained like FSDP2 already (not compared before)",
    "grouped_cast_inputs": "refused a list of modules",
    "frozen_within_units": "trained like FSDP2 already (not compared with checkpointing)",
    "frozen_across_units": "left a frozen root gathered after backward (FSDP2 frees it)",
    "offload_hook_method": "refused offload_policy; had no set_all_reduce_hook, no "
    "register_fsdp_forward_method",
    "tensor_parallel_beside": "failed at fully_shard (DTensor.from_local given a DTensor)",
    "accumulation_counts": "not compared with FSDP2's counts",
}


@pytest.fixture(scope="module")
def results(process_world):
    names = [n for n in SCENARIOS if n not in SLOW]
    return process_world(2).run(run, names)


def _result(results, name: str, rank: int):
    got = results[rank][name]
    assert not (isinstance(got, tuple) and got and got[0] == "error"), got
    return got


def _unequal(rows) -> list:
    return [r for r in rows if r[-1] != 0.0]


@pytest.mark.parametrize("name", list(MAIN))
def test_trains_bit_identical_to_fsdp2(results, name):
    """Every step: loss, full tensors, shards, gradients, placements equal bit for bit.
    (main: see ``MAIN[name]``)."""
    for rank in range(2):
        got = _result(results, name, rank)
        rows = got["rows"] if isinstance(got, dict) else got
        assert rows and _unequal(rows) == [], (MAIN[name], rank, _unequal(rows)[:5])


def test_accumulation_gathers_and_reduces_as_often_as_fsdp2(results):
    """torch's test_gradient_accumulation counts torch's collective ops (CommDebugMode),
    which minidp's own collectives are not: here FSDP2's counts beside minidp's units' own,
    per case (sync off on all units, on the root only, on two blocks; kept gathered)."""
    for case, (theirs, ours) in _result(results, "accumulation_counts", 0)["counts"].items():
        assert ours == theirs, (case, "all-gathers, reduce-scatters", theirs, ours)


def test_the_comparison_catches_a_wrong_minidp(results):
    """A minidp side that skips one chunk's backward: losses and gradients differ."""
    rows = _result(results, "negative_control", 0)
    assert {r[2] for r in _unequal(rows)} >= {"loss", "grad"}, rows[:5]


def test_dtypes_each_module_sees_are_fsdp2s(results):
    """fp16 on one submodule three ways, and an input from outside the root cast (or not)
    by the inner unit: each module is called with FSDP2's dtypes."""
    seen = _result(results, "casts", 0)["seen"]
    for name, (theirs, ours) in seen.items():
        assert ours == theirs, (name, theirs, ours)
    assert seen["fp16 on c2"][1] == ["torch.float32", "torch.float32", "torch.float16"]
    assert seen["external input, c2 does not"][1][-1] == "torch.float16 torch.float32"


def test_a_double_partial_forward_leaves_the_head_gradient_none(results):
    assert _result(results, "double_partial_forward", 0)["head grad"] == [True, True]


def test_reset_iter_state_recovers_after_an_exception(results):
    assert _result(results, "reset_after_exception", 0)["caught"] == ["boom", "boom"]


def test_the_head_stays_gathered_through_the_chunk_loop_as_on_fsdp2(results):
    theirs, ours = _result(results, "reshard_toggle", 0)["gathered"]
    assert ours == theirs and False in ours and ours[0] is True, (theirs, ours)


def test_fully_shard_state_answers_as_fsdp2s(results):
    """Roots before/after the lazy init, the states in order, module and parameter names
    (a group's in FSDP2's order), a group's modules still to run. main: no .state."""
    theirs, ours = _result(results, "introspection", 0)
    assert ours == theirs, (theirs, ours)


def test_refusals_are_fsdp2s_with_a_hint(results):
    """Same exception class; minidp's message is FSDP2's, then a hint. main: a 3-D mesh
    was taken as HSDP's rows, scalar/non-contiguous/dim checks in other words or none.
    Two blocks sharing a submodule: FSDP2 fails inside (TypeError "Invariant encountered");
    minidp refuses at the same call with the same class, and says what to do."""
    refused = _result(results, "refusals", 0)
    (t_kind, _), (o_kind, o_msg) = refused.pop("two blocks sharing a submodule")
    assert t_kind == o_kind == "TypeError", (t_kind, o_kind)
    assert "shared by both. Hint: give the shared submodule a unit of its own" in o_msg
    for name, ((t_kind, t_msg), (o_kind, o_msg)) in refused.items():
        assert o_kind == t_kind != "no error", (name, t_kind, o_kind)
        assert o_msg.startswith(t_msg.split("\n")[0].split("(\n")[0]), (name, t_msg, o_msg)
        assert len(o_msg) > len(t_msg.split("\n")[0]), (name, "no hint", o_msg)


def test_an_eval_then_a_step_computes_with_the_new_weights(results):
    """Eval forward, optimizer step, forward: minidp's output is the new weights' output.
    FSDP2 2.13 keeps its root gathered after the eval and computes with the stale copy
    (``theirs`` False): minidp frees at an eval's end instead — a deliberate difference."""
    theirs, ours = _result(results, "eval_then_step", 0)
    assert ours is True, (theirs, ours)


def test_traced_groups_keep_dtensor_shards_and_warn_nothing(results):
    """Lesson 37 wraps the mesh's groups with ``trace.tap``: the shards are DTensors on the
    torch groups behind the taps, so clip_grad_norm_ is global and no PlainShardsWarning
    (main: 8 warnings blaming a thread world, and plain shards)."""
    got = _result(results, "traced_groups", 0)
    assert got == {"plain shards warnings": 0, "dtensors": True, "global norm": True,
                   "sends logged": True}, got  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("name", SLOW)
def test_torch_compile_trains_like_fsdp2(process_world, name):
    """``torch.compile(model)`` on a wrapped model (aot_eager, and inductor): bit for bit."""
    for rank, got in enumerate(process_world(2).run(run, [name])):
        rows = got[name]
        assert not (isinstance(rows, tuple) and rows[0] == "error"), rows
        assert rows and _unequal(rows) == [], (rank, _unequal(rows)[:5])
