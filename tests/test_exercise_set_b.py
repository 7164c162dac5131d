"""``fp16_compress_hook``, ``bucket_assignment`` and ``zero1_partition``: the references
held to torch itself — DDP's rebuilt buckets on mixed dtypes, ZeRO's partition read
through its public API where a torch lacks the private one — and the hook's group check.

Run: ``pytest tests/test_exercise_set_b.py``

Solutions, stubs, slips and wrong solutions: ``tests/test_exercises.py``.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from minidp.comm.group import resolve
from minidp.launch import run_threads
from minidp.tools.exercise import check, find
from minidp.tools.exercise import report as printer
from minidp.tools.exercise.specs.bucket_assignment import torch_buckets
from minidp.tools.exercise.specs.zero1_partition import torch_owners
from minidp.zero.partition import partition_parameters

WRONG_DIR = Path(__file__).resolve().parent / "exercise_wrong"


def test_a_default_group_all_reduce_names_the_line_and_both_groups():
    """A hook all-reducing on the default group while DDP runs on a subgroup would hang:
    it is caught at the call, naming the line and both groups."""
    rep = check(find("fp16_compress_hook"), WRONG_DIR / "fp16_compress_hook__default_group.py",
                generated=0)  # fmt: skip
    text = printer.summary(rep)
    assert rep.failure.status == "error" and rep.hint.name == "used the default group", text
    assert "the hook all-reduced on the default group (WORLD, " in text and "at line 13: " in text
    assert "expected `state`, the group DDP hands the hook (a group of 2 ranks)" in text


class _Mixed(torch.nn.Module):
    """Parameters of the given sizes and dtypes, each used in registration order, so their
    gradients are ready last to first: DDP's rebuild walks them in that order."""

    def __init__(self, numels: list[int], dtypes: list[str]) -> None:
        super().__init__()
        self.ps = torch.nn.ParameterList(
            torch.nn.Parameter(torch.randn(n, dtype=getattr(torch, d)))
            for n, d in zip(numels, dtypes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for p in self.ps:
            x = x + p.sum().double()
        return x


def _ddp_rebuilt(rank: int, world: int, numels: list[int], dtypes: list[str], cap: int):
    import torch.distributed as dist

    model = _Mixed(numels, dtypes)
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=cap / 2**20)
    for _ in range(3):  # rebuilt in the second forward, logged by the third
        ddp(torch.zeros((), dtype=torch.float64)).backward()
    text = ddp._get_ddp_logging_data()["rebuilt_per_bucket_param_indices"]
    dist.barrier()
    return [[int(i) for i in bucket.split()] for bucket in text.split(",")]


MIXED = [  # (numels, dtypes, cap in bytes): with a cap of its own DDP's first bucket is the cap
    ([3, 3, 2, 5, 3, 2], ["float32", "float64"] * 3, 40),
    ([3, 3, 2, 5, 3, 2], ["float32", "float64"] * 3, 16),
    ([1, 1, 4], ["float32", "float64", "float32"], 16),  # float32 closes and re-opens
    ([4, 1, 7, 2, 6, 3, 5],
     ["float16", "float32", "float64", "float32", "float16", "float64", "float32"], 24),
]  # fmt: skip


@pytest.mark.parametrize("numels,dtypes,cap", MIXED)
def test_the_reference_is_the_order_of_ddps_rebuilt_buckets(process_world, numels, dtypes, cap):
    """With mixed dtypes DDP's rebuilt buckets come in the order they close, the still-open
    ones last (not sorted by first parameter): the reference says the same."""
    (rebuilt,) = process_world(1).run(_ddp_rebuilt, numels, dtypes, cap)
    assert torch_buckets(numels, dtypes, [cap, cap]) == rebuilt


def _public_owners(rank: int, world: int, groups: list) -> list:
    """``torch_owners`` reads only what each rank's local optimizer holds (its public
    ``param_groups``, here minidp's partition) and gathers the rest."""
    params = [[torch.zeros(n) for n in numels] for numels in groups]
    shares = partition_parameters([{"params": ps} for ps in params], world)
    zero = SimpleNamespace(optim=SimpleNamespace(param_groups=shares[rank]))
    with warnings.catch_warnings():  # a thread rank's gloo group, used as a ProcessGroup
        warnings.simplefilter("ignore", UserWarning)
        return torch_owners(zero, params, resolve())


def test_partition_fallback_gathers_every_ranks_public_share():
    """The reference's owners, read from the public shares, are those of
    minidp's partition (itself held to torch's owners in ``tests/test_zero.py``)."""
    groups = [[3, 10, 4, 7, 1], [6, 6], [2]]
    (owners, *rest) = run_threads(_public_owners, 3, groups)
    # largest first to the lightest rank, one running total: 10 7 4 3 1 | 6 6 | 2
    assert owners == [[2, 0, 2, 1, 1], [2, 1], [0]] and rest == [owners] * 2
