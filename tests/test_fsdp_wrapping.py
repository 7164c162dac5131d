"""fully_shard's refusals: a clear error at the call (or the next forward), never a hang or
a silently wrong model — and where FSDP2 refuses the same move, FSDP2's error beside minidp's.

Run: ``pytest tests/test_fsdp_wrapping.py``
"""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn as nn
from helpers import FSDP2_UNUSABLE
from test_fsdp_support import Block, TinyLM, batches

import minidp
from minidp.launch import WorkerError, run_threads

needs_fsdp2 = pytest.mark.skipif(FSDP2_UNUSABLE is not None, reason=FSDP2_UNUSABLE or "")


def _different_blocks(rank, world):
    minidp.fully_shard(Block(10 if rank == 0 else 12))


def test_ranks_wrapping_different_structures():
    with pytest.raises(WorkerError, match=r"ranks wrap different structures.*rank 0: 6 param"):
        run_threads(_different_blocks, 2, timeout=30)


def _wrap_twice(rank, world):
    block = minidp.fully_shard(Block(4))
    minidp.fully_shard(block)


def test_module_wrapped_twice():
    with pytest.raises(
        WorkerError, match=r"this FSDPBlock is wrapped already — call fully_shard once"
    ):
        run_threads(_wrap_twice, 1, timeout=30)


def test_sparse_gradients_are_refused():
    model = nn.Sequential(nn.Embedding(10, 4, sparse=True), nn.Linear(4, 2))
    with pytest.raises(ValueError, match=r"0 \(Embedding\) makes sparse gradients.*sparse=False"):
        minidp.fully_shard(model)


def test_zero_dim_parameter_is_refused():
    model = nn.Linear(2, 2)
    model.scale = nn.Parameter(torch.tensor(1.0))
    with pytest.raises(  # FSDP2's words, then minidp's hint
        ValueError,
        match=r"fully_shard doesn't support scalar parameters\. Change scale to a 1D tensor "
        r"with numel equal to 1\. \(scale is 0-dim: .*Hint: nn\.Parameter",
    ):
        minidp.fully_shard(model)


def _shared_with_wrapped_child(rank, world):
    model = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 3))
    minidp.fully_shard(model[0])
    model.extra = model[0].weight  # the parent also holds the child's (sharded) weight
    minidp.fully_shard(model)


def test_parameter_shared_with_a_wrapped_child_is_refused():
    with pytest.raises(WorkerError, match=r"0 is wrapped already but shares a parameter"):
        run_threads(_shared_with_wrapped_child, 1, timeout=30)


def _tied_across_units(rank, world) -> list[str]:
    """The embedding and the head share a weight; each side is wrapped as its own unit.
    Returns FSDP2's error, then minidp's: both raised at the first forward."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    messages = []
    for shard_fn, kw in ((fully_shard, {"mesh": init_device_mesh("cpu", (world,))}), (None, {})):
        torch.manual_seed(0)
        model = TinyLM()
        try:
            for side in (model.emb, model.head):
                (shard_fn or minidp.fully_shard)(side, **kw)
            (shard_fn or minidp.fully_shard)(model, **kw)
            model(batches(rank, 1)[0][0])
            messages.append("no error: the tied weight was silently untied")
        except ValueError as exc:
            messages.append(str(exc))
    return messages


@needs_fsdp2
def test_weight_tied_across_two_units_is_refused_like_fsdp2(process_world):
    for theirs, ours in process_world(2).run(_tied_across_units):
        assert "is shared with a parameter already managed by another FSDP group" in theirs
        assert re.search(
            r"Parameter 'weight' of Linear is shared with a parameter already managed by "
            r"another FSDP group \(Embedding.weight\)\. Tied parameters must be in one unit",
            ours,
        ), ours


def _root_before_children(rank, world) -> list[str]:
    """The root wrapped first, then a block: FSDP2 and minidp both refuse the second call."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    messages = []
    for shard_fn, kw in ((fully_shard, {"mesh": init_device_mesh("cpu", (world,))}), (None, {})):
        model = TinyLM()
        (shard_fn or minidp.fully_shard)(model, **kw)
        try:
            (shard_fn or minidp.fully_shard)(model.blocks[0], **kw)
            messages.append("no error at the call")
        except (TypeError, ValueError) as exc:
            messages.append(f"{type(exc).__name__}: {exc}")
    return messages


@needs_fsdp2
def test_wrapping_the_root_before_its_children_is_refused_at_the_call(process_world):
    for theirs, ours in process_world(2).run(_root_before_children):
        assert theirs != "no error at the call", "FSDP2 accepted it: re-check this test"
        assert re.fullmatch(
            r"ValueError: fully_shard: Block's parameter 'norm.weight' is already a shard of an "
            r"enclosing unit \(TinyLM\): wrap the submodules first, then the root .*",
            ours,
        ), ours


def _sync_flag(rank, world, flag):
    minidp.fully_shard(Block(4)).set_requires_gradient_sync(flag)


def test_set_requires_gradient_sync_takes_a_bool():
    with pytest.raises(WorkerError, match=r"expected True or False, got 'no'"):
        run_threads(_sync_flag, 1, "no", timeout=30)


def test_ignored_params_must_be_parameters():
    block = Block(4)
    with pytest.raises(
        TypeError, match=r"ignored_params must be a set of nn.Parameter, got Tensor"
    ):
        minidp.fully_shard(block, ignored_params=block.fc1.weight.detach())
