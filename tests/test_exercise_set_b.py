"""Exercises ``fp16_compress_hook``, ``bucket_assignment`` and ``zero1_partition``: the
solutions pass, the stubs say "not implemented yet", each classic wrong solution fails with
its own hint, and the checkers' own ports agree with torch.

Run: ``pytest tests/test_exercise_set_b.py``

"""

from __future__ import annotations

import random
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from minidp.comm.group import resolve
from minidp.launch import run_threads
from minidp.tools.exercise import check, find
from minidp.tools.exercise import report as printer
from minidp.tools.exercise.bucket_assignment import CASES as BUCKET_CASES
from minidp.tools.exercise.bucket_assignment import DTYPES
from minidp.tools.exercise.bucket_rule import _walk, torch_buckets
from minidp.tools.exercise.partition_rule import _greedy, _torch_owners
from minidp.tools.exercise.zero1_partition import CASES as PARTITION_CASES
from minidp.zero.partition import partition_parameters

WRONG_DIR = Path(__file__).resolve().parent / "exercise_wrong"
NAMES = ("fp16_compress_hook", "bucket_assignment", "zero1_partition")

# (exercise, file tests/exercise_wrong/NAME__WHAT.py, the mistake its hint must name)
WRONG = [
    ("bucket_assignment", "forward", "walked first to last"),
    ("bucket_assignment", "past_cap", "bucket closed past the cap"),
    ("bucket_assignment", "one_cap", "no small first bucket"),
    ("bucket_assignment", "mixed_dtypes", "dtypes mixed in one bucket"),
    ("bucket_assignment", "crossing_next", "the crossing parameter started the next bucket"),
    ("bucket_assignment", "elements", "counted elements, not bytes"),
    ("bucket_assignment", "drop_open", "open buckets dropped"),
    ("bucket_assignment", "sorted_order", "sorted by first parameter"),
    ("zero1_partition", "round_robin", "round robin"),
    ("zero1_partition", "blocks", "contiguous blocks by count"),
    ("zero1_partition", "unsorted", "not sorted by size"),
    ("zero1_partition", "ties_high", "ties to the highest rank"),
    ("zero1_partition", "per_group", "totals restarted in every group"),
    ("zero1_partition", "ascending", "sorted smallest first"),
    ("zero1_partition", "index_by_value", "found a parameter by its size"),
    ("zero1_partition", "reversed_ties", "equal sizes in reverse order"),
    ("zero1_partition", "by_count", "balanced parameter counts"),
    ("zero1_partition", "across_groups", "sorted across the groups"),
    ("fp16_compress_hook", "no_divide", "forgot to divide by the world size"),
    ("fp16_compress_hook", "divide_after", "divided after the sum"),
    ("fp16_compress_hook", "divide_before", "divided before compressing"),
    ("fp16_compress_hook", "not_copied", "sum never copied into the bucket"),
    ("fp16_compress_hook", "bfloat16", "compressed to bfloat16"),
    ("fp16_compress_hook", "compress_after", "compressed after the all-reduce"),
    ("fp16_compress_hook", "divide_twice", "divided twice"),
]
# wrong solutions that RAISE on a rank (the hint comes from the error)
WRONG_RAISES = [
    ("fp16_compress_hook", "returns_work_future", "returned the all-reduce's future"),
    ("fp16_compress_hook", "default_group", "all-reduced on the default group"),
]


@pytest.mark.parametrize("name", NAMES)
def test_solution_passes(name):
    exercise = find(name)
    rep = check(exercise, exercise.solution, generated=2)
    assert rep.passed, printer.summary(rep)
    worlds = {o.case["world"] for o in rep.outcomes}
    assert {1, 2, 3} <= worlds, worlds


@pytest.mark.parametrize("name", NAMES)
def test_stub_is_not_implemented_yet(name):
    rep = check(find(name))
    assert rep.failure is not None and rep.failure.status == "todo", printer.summary(rep)
    assert "not implemented yet" in printer.summary(rep)
    assert len(rep.outcomes) == 1


@pytest.mark.parametrize("name,what,mistake", WRONG, ids=[f"{n}-{w}" for n, w, _ in WRONG])
def test_wrong_solution_fails_with_its_hint(name, what, mistake):
    rep = check(find(name), WRONG_DIR / f"{name}__{what}.py", generated=0)
    text = printer.summary(rep)
    assert not rep.passed and rep.failure.status == "wrong", text
    assert rep.failure.mistake is not None and rep.failure.mistake.name == mistake, text
    assert f"hint ({mistake}): " in text and "expected" in text and "got" in text
    first = next(o for o in rep.outcomes if not o.passed)
    assert rep.failure.case["world"] <= first.case["world"]  # shrunk, never grown


@pytest.mark.parametrize(
    "name,what,mistake", WRONG_RAISES, ids=[f"{n}-{w}" for n, w, _ in WRONG_RAISES]
)
def test_wrong_solution_that_raises_fails_with_its_hint(name, what, mistake):
    rep = check(find(name), WRONG_DIR / f"{name}__{what}.py", generated=0)
    text = printer.summary(rep)
    assert not rep.passed and rep.failure.status == "error", text
    assert rep.failure.mistake is not None and rep.failure.mistake.name == mistake, text
    assert f"hint ({mistake}): " in text and "raised" in text


def test_a_default_group_all_reduce_names_the_line_and_both_groups():
    """Once a 6 s deadlock with no line shown: now caught at the call."""
    rep = check(find("fp16_compress_hook"), WRONG_DIR / "fp16_compress_hook__default_group.py",
                generated=0)  # fmt: skip
    text = printer.summary(rep)
    assert rep.failure.status == "error" and rep.failure.case["world"] == 2, text
    assert "the hook all-reduced on the default group (WORLD, 2 ranks) at line 13: " in text
    assert "expected `state`, the group DDP hands the hook (a group of 2 ranks)" in text


def test_every_wrong_solution_is_on_disk_and_tested():
    rows = WRONG + WRONG_RAISES
    for name in NAMES:
        assert sum(n == name for n, _, _ in rows) >= 3, name
    on_disk = {p.stem for p in WRONG_DIR.glob("*.py") if p.stem.split("__")[0] in NAMES}
    assert on_disk == {f"{n}__{w}" for n, w, _ in rows}


# ----------------------------------------------------------------------------- the ports


def test_bucket_port_equals_torchs_function():
    """``_walk`` (the reference where torch lacks its private function, and the source of
    the mistakes' answers) builds torch's buckets, on the fixed cases and random ones."""
    rng = random.Random(0)
    cases = [(c["numels"], c["dtypes"], c["limits"]) for c in BUCKET_CASES]
    for _ in range(200):
        n = rng.randint(1, 8)
        numels = [rng.randint(1, 50) for _ in range(n)]
        dtypes = [rng.choice(DTYPES) for _ in range(n)]
        limits = [rng.choice([1, 8, 16, 24, 40, 64, 100]) for _ in range(rng.randint(1, 3))]
        cases.append((numels, dtypes, limits))
    for numels, dtypes, limits in cases:
        port, theirs = _walk(numels, dtypes, limits), torch_buckets(numels, dtypes, limits)
        assert port == theirs, (numels, dtypes, limits)


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
        out = x
        for p in self.ps:
            out = out + p.sum().double()
        return out


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
    (
        [4, 1, 7, 2, 6, 3, 5],
        ["float16", "float32", "float64", "float32", "float16", "float64", "float32"],
        24,
    ),  # fmt: skip
]


@pytest.mark.parametrize("numels,dtypes,cap", MIXED)
def test_the_reference_is_the_order_of_ddps_rebuilt_buckets(process_world, numels, dtypes, cap):
    """With mixed dtypes DDP's rebuilt buckets come in the order they close, the still-open
    ones last (not sorted by first parameter): the reference and its port say the same."""
    (rebuilt,) = process_world(1).run(_ddp_rebuilt, numels, dtypes, cap)
    assert torch_buckets(numels, dtypes, [cap, cap]) == rebuilt
    assert _walk(numels, dtypes, [cap, cap]) == rebuilt
    assert _walk(numels, dtypes, [cap, cap], sorted_order=True) != rebuilt or cap == 40


def test_partition_port_equals_minidps_textbook_rule():
    """``_greedy`` without a slip is minidp's ``partition_parameters`` (itself held to
    torch's owners in ``tests/test_zero.py``), multi-group totals included."""
    rng = random.Random(1)
    cases = [(c["groups"], c["world"]) for c in PARTITION_CASES]
    for _ in range(100):
        groups = [[rng.randint(1, 12) for _ in range(rng.randint(1, 5))]
                  for _ in range(rng.randint(1, 3))]  # fmt: skip
        cases.append((groups, rng.randint(1, 5)))
    for groups, world in cases:
        params = [[torch.zeros(n) for n in numels] for numels in groups]
        shares = partition_parameters([{"params": ps} for ps in params], world)
        owner = {id(p): r for r in range(world) for g in shares[r] for p in g["params"]}
        assert _greedy(groups, world) == [[owner[id(p)] for p in ps] for ps in params]


def _public_owners(rank: int, world: int, groups: list) -> list:
    """``_torch_owners`` on a ZeRO without ``_partition_parameters``: each rank knows only
    its local optimizer's ``param_groups`` (here minidp's partition) and gathers the rest."""
    params = [[torch.zeros(n) for n in numels] for numels in groups]
    shares = partition_parameters([{"params": ps} for ps in params], world)
    zero = SimpleNamespace(optim=SimpleNamespace(param_groups=shares[rank]))
    with warnings.catch_warnings():  # a thread rank's gloo group, used as a ProcessGroup
        warnings.simplefilter("ignore", UserWarning)
        return _torch_owners(zero, params, resolve())


def test_partition_fallback_gathers_every_ranks_public_share():
    """The reference's fallback for a torch without the private method: the same owners."""
    groups = [[3, 10, 4, 7, 1], [6, 6], [2]]
    assert run_threads(_public_owners, 3, groups) == [_greedy(groups, 3)] * 3
