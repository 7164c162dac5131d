"""``minidp.comm.reduce_scatter_tensor`` against gloo (thread worlds).

Run: ``pytest tests/test_reduce_scatter_tensor.py``

ZeRO-2 reduce-scatters each bucket's flat send buffer with ``input_is_scratch=True``: the
ring works in the buffer itself instead of a copy of it. Here: the result is
``torch.equal`` to this rank's slice of gloo's all-reduce of the same input (the ring's
reduce-scatter half adds in gloo's order) and to the list form, with and without scratch;
without it the input is left as it was (as torch's is); the bytes sent are the same; a
wrong input is refused clearly on every rank.
"""

from __future__ import annotations

import pytest
import torch
from helpers import gloo_all_reduce, rank_input

from minidp.comm import count_traffic, reduce_scatter, reduce_scatter_tensor
from minidp.launch import WorkerError, run_threads


def _vs_gloo(rank: int, world: int, numel: int, dtype, op: str) -> dict:
    x = rank_input(rank, world * numel, dtype, 11)  # (world * numel,) rank-local
    kept = x.clone()
    out = {}
    with count_traffic() as copied:
        out["copied"] = reduce_scatter_tensor(torch.empty(numel, dtype=dtype), x, op)
    out["input unchanged"] = torch.equal(x, kept)
    scratch = x.clone()
    with count_traffic() as lent:
        out["scratch"] = reduce_scatter_tensor(
            torch.empty(numel, dtype=dtype), scratch, op, input_is_scratch=True
        )
    out["list"] = reduce_scatter(torch.empty(numel, dtype=dtype), list(x.chunk(world)), op)
    everything = x.clone()
    gloo_all_reduce(everything, op)
    out["gloo"] = everything[rank * numel : (rank + 1) * numel]
    out["bytes"] = (copied.sent_bytes, lent.sent_bytes)
    return out


@pytest.mark.parametrize("world, numel", [(2, 1), (2, 70_001), (3, 37), (4, 4096), (5, 300)])
@pytest.mark.parametrize(
    "dtype, op",  # no integer avg: refused, as all_reduce refuses it (test_collectives)
    [(d, op) for d in (torch.float32, torch.bfloat16, torch.int64) for op in ("sum", "avg", "max")
     if d.is_floating_point or op != "avg"],
)  # fmt: skip
def test_reduce_scatter_tensor_equals_gloo_with_and_without_scratch(world, numel, dtype, op):
    for res in run_threads(_vs_gloo, world, numel, dtype, op):
        # the tensor form is the list form's ring, bit for bit, whether or not it may
        # work in the input; only the copy differs, never the bytes on the wire
        assert torch.equal(res["copied"], res["list"])
        assert torch.equal(res["scratch"], res["list"])
        assert res["input unchanged"]
        assert res["bytes"][0] == res["bytes"][1] > 0
        if op == "max" or not dtype.is_floating_point:
            assert torch.equal(res["copied"], res["gloo"])
        else:
            # gloo's all-reduce cuts the whole buffer into its own chunks, which need not
            # fall on the ranks' slices (world 3 x 37 elements): its float sums may add in
            # another order than the ring's reduce-scatter. A few ulps per addition.
            tol = {torch.bfloat16: 5e-2}.get(dtype, 1e-5)
            torch.testing.assert_close(res["copied"], res["gloo"], rtol=tol, atol=tol * world)


def _wrong_input(rank: int, world: int) -> None:
    reduce_scatter_tensor(torch.empty(2), torch.ones(3))


def test_a_wrong_input_is_refused_on_every_rank():
    with pytest.raises(
        WorkerError,
        match=r"reduce_scatter_tensor: expected a contiguous torch.float32 input of 2 x 2 "
        r"elements, got \(3,\)",
    ) as info:
        run_threads(_wrong_input, 2, timeout=20)
    assert len(info.value.failures) == 2
