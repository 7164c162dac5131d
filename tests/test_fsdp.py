"""minidp.fully_shard against FSDP2 (``torch.distributed.fsdp.fully_shard``), in real processes.

Both wrap the same seeded transformer-like model (embedding tied to the output head,
LayerNorms, linears; row counts 13, 10 and 30 so 2, 3 and 4 ranks all need padding) the
same way — each block, then the root — and train it on the same per-rank data. After every
step, per parameter: the full parameter, this rank's shard (FSDP2: ``to_local()``) and the
shard's gradient.

Bit-exact at 2, 3 and 4 ranks, fp32, bf16 and fp16 (``torch.equal``), with ``reduce_dtype``
unset (what that means changed in torch 2.15: ``minidp/fsdp/policy.py``) and set. With 2
ranks each averaged gradient element is one addition and one halving, so any
reduce-scatter gives the same bits. From 3 ranks on the order of additions matters: gloo's
reduce-scatter is an all-reduce of the whole input, and ``minidp.comm.reduce_scatter_tensor``
adds in that same order (checked by itself in ``tests/test_reduce_scatter.py``; a ring order
rounds a few gradient elements differently at 4 ranks, and AdamW carries that into the
weights).

FSDP2 needs gloo's reduce-scatter (torch >= 2.8), and torch 2.8's FSDP2 sums gradients
instead of averaging them on gloo: the comparisons skip there (``helpers.FSDP2_UNUSABLE``);
minidp's own code runs on every torch (the error tests below, the textbook test).

Run: ``pytest tests/test_fsdp.py``
"""

from __future__ import annotations

import copy

import pytest
import torch
from fsdp_scenarios import SCENARIOS, resume_at, run_scenario, trained_full_state
from helpers import FSDP2_UNUSABLE
from test_fsdp_support import BLOCKS as BLOCKS_IN_LM
from test_fsdp_support import (
    Block,
    TinyLM,
    batches,
    loss_fn,
    round_trip,
    seeded_lm,
    textbook_vs_fully_shard,
    wrap,
)

import minidp
from minidp.comm import count_traffic
from minidp.fsdp import shard, sharded_bytes, traffic
from minidp.launch import run_threads

needs_fsdp2 = pytest.mark.skipif(FSDP2_UNUSABLE is not None, reason=FSDP2_UNUSABLE or "")


@pytest.fixture(scope="module")
def parity(process_world):
    cache: dict[tuple, list] = {}

    def get(world: int, name: str) -> list:
        if (world, name) not in cache:
            cache[world, name] = process_world(world).run(run_scenario, name)
        return cache[world, name]

    return get


@needs_fsdp2
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_bit_identical_to_fsdp2_at_two_ranks(parity, name):
    for rank, rows in enumerate(parity(2, name)):
        diffs = [r for r in rows if r[3] != 0.0]
        assert rows and diffs == [], f"rank {rank}: (step, param, what, max |diff|): {diffs[:5]}"


@needs_fsdp2
@pytest.mark.parametrize(
    "world, name",
    # the default run: padding everywhere, gloo's order over 4 ranks, bf16, and fp16's
    # divide-before and divide-after the sum (2 and 2: a wrong factor shows only here)
    [(4, "bf16"), (4, "fp16_reduce_fp16")]
    + [
        pytest.param(w, n, marks=pytest.mark.slow)
        for w, n in ((3, "adamw"), (3, "sgd_keep_gathered"), (3, "bf16"), (4, "adamw"))
        + ((4, "sgd_keep_gathered"), (4, "bf16_reduce_fp32"), (4, "fp16"))
    ],
)
def test_bit_identical_to_fsdp2_at_three_and_four_ranks(parity, world, name):
    for rank, rows in enumerate(parity(world, name)):
        diffs = [r for r in rows if r[3] != 0.0]
        assert rows and diffs == [], f"rank {rank}: (step, param, what, max |diff|): {diffs[:5]}"


def test_shards_are_torch_chunks_padded():
    """Every rank's rows are ``torch.chunk``'s (FSDP2's rule, ZeRO-2's too), empty where
    chunk has none (5 rows on 4 ranks: 2, 2, 1, 0), padded to the first chunk's length."""
    for dim0 in range(0, 14):
        full = torch.arange(dim0 * 2.0).view(dim0, 2)
        for world in range(1, 6):
            chunks = torch.chunk(full, world) if dim0 else ()
            for rank in range(world):
                want = chunks[rank] if rank < len(chunks) else full[:0]
                start, stop = shard.shard_range(dim0, world, rank)
                assert torch.equal(full[start:stop], want), (dim0, world, rank)
                assert shard.shard_length(dim0, world, rank) == len(want), (dim0, world, rank)
                padded = shard.padded_shard(full, world, rank)
                assert padded.shape[0] == (len(chunks[0]) if chunks else 0)
                assert torch.equal(padded[: len(want)], want)
                assert not padded[len(want) :].any()  # the padding is zeros


@needs_fsdp2
@pytest.mark.parametrize("param_dtype", [None, torch.bfloat16], ids=["fp32", "bf16"])
def test_full_state_dict_saved_at_two_ranks_resumes_at_three_like_fsdp2(process_world, param_dtype):
    """W -> W': the full state dict of a 2-rank run loads into 3-rank FSDP2 and minidp
    (13 rows: 5, 5, 3 per rank), equal right after loading and for 2 more steps. bf16: both
    trained and resumed under MixedPrecisionPolicy(param_dtype=bf16) — the state dict holds
    the fp32 shards, not the bf16 copies."""
    state = process_world(2).run(trained_full_state, param_dtype)[0]
    assert all(t.dtype == torch.float32 for t in state.values())
    for rank, rows in enumerate(process_world(3).run(resume_at, state, param_dtype)):
        diffs = [r for r in rows if r[3] != 0.0]
        assert rows and diffs == [], f"rank {rank}: (step, param, what, max |diff|): {diffs[:5]}"


def test_state_dicts_round_trip(process_world):
    """Sharded state_dict -> fresh model, full state dict -> fresh model: equal, same output."""
    for rank, result in enumerate(process_world(2).run(round_trip)):
        assert result == dict.fromkeys(result, True), f"rank {rank}: {result}"


def test_textbook_equals_fully_shard():
    """2 ranks: one addition per element, so the flat shard and dim-0 shards agree exactly."""
    for rank, rows in enumerate(run_threads(textbook_vs_fully_shard, 2)):
        diffs = [r for r in rows if r[2] != 0.0]
        assert rows and diffs == [], f"rank {rank}: (step, param, max |diff|): {diffs[:5]}"


def _traffic_per_step(rank, world, param_dtype, reduce_dtype):
    policy = minidp.MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype)
    model = wrap(seeded_lm(), minidp.fully_shard, True, policy)
    readings = []
    for tokens, target in batches(rank, 3):
        loss_fn(model, tokens, target).backward()
        readings.append(traffic(model).sent_bytes)
    with count_traffic() as header:
        minidp.comm.barrier()  # what one collective's cross-rank header check sends
    return readings[2] - readings[1], sharded_bytes(model)["params"], header.sent_bytes


def test_traffic_per_step_is_three_passes_of_the_shards():
    """2 ranks: each rank sends its padded shards once per all-gather (2 per block: forward
    and backward; 1 for the root, kept gathered) and once for the reduce-scatter, plus the
    header check of each collective; bf16 gathers and reduces halve their payload."""
    world = 2
    bf16, fp32 = torch.bfloat16, torch.float32
    # (param_dtype, reduce_dtype, bytes per gathered element, bytes per reduced element)
    for param_dtype, reduce_dtype, gather, reduce in (
        (None, None, 4, 4),
        (bf16, bf16, 2, 2),
        (bf16, fp32, 2, 4),
    ):
        for rank, (step, shard_bytes, header) in enumerate(
            run_threads(_traffic_per_step, world, param_dtype, reduce_dtype)
        ):
            blocks = sum(p.numel() for p in Block(10).parameters()) * BLOCKS_IN_LM  # even rows
            root = shard_bytes // 4 - blocks // world  # root's padded shard, elements
            gathered = (2 * blocks // world + root) * gather  # blocks twice, the root once
            reduced = (blocks // world + root) * reduce
            payload = (gathered + reduced) * (world - 1)
            collectives = 3 * BLOCKS_IN_LM + 2
            assert step == payload + collectives * header, (rank, param_dtype, step, payload)


def _peak(rank, world, reshard):
    torch.manual_seed(0)  # (threads share the RNG, but only shapes matter here)
    model = wrap(TinyLM(blocks=4), minidp.fully_shard, reshard, None)
    for tokens, target in batches(rank, 3):
        loss_fn(model, tokens, target).backward()
    return sharded_bytes(model)["peak_gathered"]


@pytest.mark.parametrize("reshard", [True, False])
def test_peak_gathered_is_the_root_and_two_blocks(reshard):
    """Resharding after forward: at most the root, the unit computing and the one being
    prefetched are gathered at once. Without it every block stays gathered until backward
    has passed it, so the peak is the whole model."""
    block = sum(p.numel() for p in Block(10).parameters()) * 4  # full fp32 bytes
    root = (13 * 10 + 2 * 10) * 4  # tied embedding/head + final norm
    for peak in run_threads(_peak, 2, reshard):
        if reshard:
            assert root + block <= peak <= root + 2 * block, (peak, root, block)
        else:
            assert peak == root + 4 * block, (peak, root, block)


def _rms_norm_bf16(rank: int, world: int) -> list[bool]:
    """A bf16 policy over a layer whose weight gradient autograd computes in float32
    (RMSNorm's): two steps of FSDP2 and of minidp, the second over two microbatches (the
    first without gradient sync), every parameter bit for bit after each step."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.RMSNorm(8), torch.nn.Linear(8, 2))
    xs = torch.randn(3, 4, 8, generator=torch.Generator().manual_seed(rank))  # 3 microbatches
    after = []
    pairs = ((fully_shard, MixedPrecisionPolicy), (minidp.fully_shard, minidp.MixedPrecisionPolicy))
    for shard_fn, policy in pairs:
        model = shard_fn(copy.deepcopy(net), mp_policy=policy(param_dtype=torch.bfloat16))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in ([xs[0]], [xs[1], xs[2]]):
            for i, x in enumerate(step):
                model.set_requires_gradient_sync(i == len(step) - 1)
                model(x).float().square().mean().backward()
            opt.step()
            opt.zero_grad()
            after += [p.full_tensor() for p in model.parameters()]
    half = len(after) // 2
    return [torch.equal(a, b) for a, b in zip(after[:half], after[half:])]


@needs_fsdp2
def test_a_float32_gradient_of_a_bf16_parameter_is_reduced_like_fsdp2(process_world):
    """A gradient autograd computes in float32 for a bf16 parameter: FSDP2 up to 2.14
    casts it to bf16; 2.15 keeps it and reduces every gradient in the promoted dtype (float32),
    which minidp follows for the torch it runs on."""
    assert process_world(2).run(_rms_norm_bf16) == [[True] * 10] * 2
