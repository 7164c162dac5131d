"""The textbook DataParallel step, DDP and DistributedSampler against torch's components.

Run: ``pytest tests/test_textbook_dp_ddp.py``

* ``minidp.textbook.dp.data_parallel_step``: ``torch.equal`` against the per-chunk
  definition and ``minidp.DataParallel`` (n = 1..5, MLP / conv / BatchNorm, batches
  smaller than n); against ``torch.nn.DataParallel``, which on a CPU-only machine is the
  plain module, ``assert_close`` (one full-batch matmul vs per-chunk matmuls).
* ``minidp.textbook.ddp.DistributedDataParallel`` in real gloo processes: world 2,
  ``torch.equal`` with ``torch.nn.parallel.DistributedDataParallel`` after every step
  (each element's sum is one addition, so bucket layouts cannot matter); world 3,
  ``torch.equal`` with the textbook's buckets gathered by torch's ``all_gather`` and summed
  in the book ring's order, and ``assert_close`` with torch DDP (other buckets and chunks,
  so another summation order).
* ``minidp.textbook.sampler.DistributedSampler``: the exact indices of torch's.
"""

from __future__ import annotations

import ast
import copy
import inspect
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from test_ddp_support import MLP, _diffs
from test_dp_models import loss_of, make_case, per_chunk_reference
from test_textbook_comm import textbook_order
from torch import nn

import minidp
from minidp.dp.devices import official_data_parallel
from minidp.launch import run_threads
from minidp.textbook import ddp as textbook
from minidp.textbook.dp import data_parallel_step
from minidp.textbook.sampler import DistributedSampler as TextbookSampler

# ----------------------------------------------------------------------------- DataParallel


def _step(name: str, n: int, batch: int):
    model, (x, *_), _ = make_case(name, batch=batch, seed=n)
    out, loss = data_parallel_step(model, x, x, lambda o, _: loss_of(o), ["cpu"] * n)
    return model, x, out, loss


@pytest.mark.parametrize("name", ["mlp", "conv", "bn"])
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_data_parallel_step_bit_exact_with_definition_and_minidp(name, n):
    for batch in (14, 6):  # 6 rows on 4 or 5 devices: 3 chunks, fewer than devices
        model, x, out, loss = _step(name, n, batch)
        ref_out, ref_grads = per_chunk_reference(make_case(name, batch, seed=n)[0], (x,), {}, n)
        assert torch.equal(out, ref_out)
        assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), ref_grads))
        faithful = make_case(name, batch, seed=n)[0]
        dp_out = minidp.DataParallel(faithful, device_ids=["cpu"] * n)(x)
        loss_of(dp_out).backward()
        assert torch.equal(out, dp_out) and torch.equal(loss, loss_of(dp_out))
        for a, b in zip(model.state_dict().values(), faithful.state_dict().values()):
            assert torch.equal(a, b)  # BatchNorm: replica 0's running stats kept, like torch
        assert all(
            torch.equal(a.grad, b.grad) for a, b in zip(model.parameters(), faithful.parameters())
        )


def test_data_parallel_step_vs_torch_data_parallel_on_cpu():
    model, (x, *_), _ = make_case("mlp", batch=14, seed=0)
    # simulated devices: torch's wrapper is what it is without GPUs, the plain module
    official = official_data_parallel(copy.deepcopy(model), ["cpu"] * 4)
    out, _ = data_parallel_step(model, x, x, lambda o, _: loss_of(o), ["cpu"] * 4)
    ref = official(x)
    loss_of(ref).backward()
    # float32: per-chunk matmuls and a sum of 4 chunk gradients vs one full-batch matmul
    # round differently; the default float32 tolerances hold (a few ulps).
    torch.testing.assert_close(out, ref)
    for a, b in zip(model.parameters(), official.parameters()):
        torch.testing.assert_close(a.grad, b.grad)


def test_data_parallel_step_accumulates_into_existing_grad():
    model, x, _, _ = _step("mlp", 3, 9)
    first = [p.grad.clone() for p in model.parameters()]
    data_parallel_step(model, x, x, lambda o, _: loss_of(o), ["cpu"] * 3)
    assert all(torch.equal(p.grad, g + g) for p, g in zip(model.parameters(), first))


def test_data_parallel_step_errors():
    model = make_case("mlp", batch=4)[0]
    with pytest.raises(ValueError, match=r"got 4 device\(s\) and a batch of 0 — skip empty"):
        data_parallel_step(model, torch.zeros(0, 6), None, F.mse_loss, ["cpu"] * 4)
    with pytest.raises(ValueError, match=r"got 0 device\(s\)"):
        data_parallel_step(model, torch.zeros(4, 6), None, F.mse_loss, [])
    # a replica's exception reaches the caller (here: 5 features for a Linear(6, ...))
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        data_parallel_step(model, torch.zeros(4, 5), None, F.mse_loss, ["cpu"] * 2)


# ----------------------------------------------------------------------------- DDP


def _local_batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)


def textbook_vs_torch(rank: int, world: int, steps: int = 3, cap_mb: float = 0.0005) -> dict:
    """Train the same seeded MLP through torch DDP, the textbook DDP and a reference: the
    textbook's buckets gathered with torch's all_gather, summed in the book ring's order."""
    torch.manual_seed(100 + rank)  # different weights on every rank: the broadcast matters
    mine_model = MLP()
    theirs_model = copy.deepcopy(mine_model)
    ref = copy.deepcopy(mine_model)
    mine = textbook.DistributedDataParallel(mine_model, bucket_cap_mb=cap_mb)
    theirs = nn.parallel.DistributedDataParallel(theirs_model)
    for t in ref.state_dict().values():
        dist.broadcast(t, 0)  # the reference starts from rank 0's weights too
    index = {p: i for i, p in enumerate(mine_model.parameters())}
    layout = [[index[p] for p in b] for b in mine.buckets]
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (mine, theirs, ref)]
    out = {"vs_torch": [], "vs_ring": [], "max_diff": 0.0, "layout": layout}
    for step in range(steps):
        x, y = _local_batch(rank, step)
        for opt in opts:
            opt.zero_grad()
        F.mse_loss(mine(x), y).backward()
        F.mse_loss(theirs(x), y).backward()
        F.mse_loss(ref(x), y).backward()
        params = list(ref.parameters())
        for bucket in layout:  # every rank's flat bucket, summed in the ring's order
            flat = torch.cat([params[i].grad.reshape(-1) * (1.0 / world) for i in bucket])
            everyone = [torch.empty_like(flat) for _ in range(world)]
            dist.all_gather(everyone, flat)
            flat = textbook_order(everyone, "sum")
            for i in bucket:
                params[i].grad.copy_(flat[: params[i].numel()].view_as(params[i]))
                flat = flat[params[i].numel() :]
        out["vs_torch"] += _diffs(step, theirs_model, mine_model)
        out["vs_ring"] += _diffs(step, ref, mine_model)
        for a, b in zip(theirs_model.parameters(), mine_model.parameters()):
            out["max_diff"] = max(out["max_diff"], (a.grad - b.grad).abs().max().item())
        for opt in opts:
            opt.step()
    return out


@pytest.mark.parametrize("world_size", [2, 3])
def test_textbook_ddp_against_torch_ddp_and_the_rings_order(process_world, world_size):
    for rank, res in enumerate(process_world(world_size).run(textbook_vs_torch)):
        assert len(res["layout"]) >= 3, res["layout"]  # several buckets, last layer first
        assert res["layout"][0] == [5, 4], res["layout"]
        assert res["vs_ring"] == [], f"rank {rank}: textbook vs its buckets in the ring's order"
        if world_size == 2:  # one addition per element: any layout gives the same bits
            assert res["vs_torch"] == [], f"rank {rank}: textbook vs torch DDP"
        else:  # torch's buckets differ, so the ring adds in another order: rounding only
            assert res["max_diff"] < 1e-7, res  # measured 1.5e-8: a few float32 ulps


def _overlap(rank: int, world: int) -> dict:
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(64, 64) for _ in range(4)])
    holder: dict = {}
    launched_when_ready: list[int] = []
    for p in model.parameters():  # registered first: runs before the textbook's hook
        p.register_post_accumulate_grad_hook(
            lambda p: launched_when_ready.append(len(holder["ddp"].futures))
        )
    holder["ddp"] = textbook.DistributedDataParallel(model, bucket_cap_mb=64 * 64 * 4 / 2**20)
    holder["ddp"](torch.randn(32, 64)).square().mean().backward()
    return {"launched": launched_when_ready, "buckets": len(holder["ddp"].buckets)}


def test_textbook_ddp_launches_buckets_during_backward():
    """Deterministic event order, no clocks: when the later gradients arrive (first
    layers), the earlier buckets (last layers) have already been handed to the comm
    thread, in index order — that is the overlap."""
    for res in run_threads(_overlap, 2):
        assert res["buckets"] == 4
        assert res["launched"][-1] == 3, res  # 3 buckets left before the last gradient
        assert res["launched"] == sorted(res["launched"])


def _unused_then_forward(rank: int, world: int) -> None:
    model = nn.ModuleDict({"used": nn.Linear(4, 4), "unused": nn.Linear(4, 4)})
    ddp = textbook.DistributedDataParallel(model, bucket_cap_mb=1e-5)
    ddp.module["used"](torch.randn(2, 4)).sum().backward()  # no forward through ddp


def _skips_a_parameter(rank: int, world: int) -> None:
    model = nn.ModuleDict({"used": nn.Linear(4, 4), "unused": nn.Linear(4, 4)})
    ddp = textbook.DistributedDataParallel(model, bucket_cap_mb=1e-5)
    ddp.module = model["used"]  # forward runs only "used": "unused" never gets a gradient
    ddp(torch.randn(2, 4)).sum().backward()
    ddp(torch.randn(2, 4))


def test_textbook_ddp_errors():
    with pytest.raises(ValueError, match="expected bucket_cap_mb > 0.*got bucket_cap_mb=0"):
        textbook.DistributedDataParallel(nn.Linear(2, 2), bucket_cap_mb=0)
    frozen = nn.Linear(2, 2).requires_grad_(False)
    with pytest.raises(ValueError, match="got bucket_cap_mb=25.0, 0 trainable"):
        textbook.DistributedDataParallel(frozen)
    mixed = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2).double())
    with pytest.raises(ValueError, match=r"dtypes \['torch.float32', 'torch.float64'\]"):
        textbook.DistributedDataParallel(mixed)
    with pytest.raises(minidp.launch.WorkerError, match="no forward through the wrapper"):
        run_threads(_unused_then_forward, 1, timeout=20)
    with pytest.raises(minidp.launch.WorkerError, match="produced no gradient for 2 param"):
        run_threads(_skips_a_parameter, 2, timeout=20)


# ----------------------------------------------------------------------------- sampler


@settings(max_examples=80, deadline=None)
@given(
    length=st.integers(0, 60),
    world=st.integers(1, 7),
    seed=st.integers(0, 2**31),
    epoch=st.integers(0, 20),
    shuffle=st.booleans(),
    drop_last=st.booleans(),
)
def test_textbook_sampler_matches_torch(length, world, seed, epoch, shuffle, drop_last):
    for rank in range(world):
        kw = dict(num_replicas=world, rank=rank, shuffle=shuffle, seed=seed, drop_last=drop_last)
        ours = TextbookSampler(range(length), **kw)
        theirs = torch.utils.data.DistributedSampler(range(length), **kw)
        ours.set_epoch(epoch)
        theirs.set_epoch(epoch)
        assert list(ours) == list(theirs)
        assert len(ours) == len(theirs)


def test_textbook_sampler_bad_rank():
    with pytest.raises(ValueError, match="expected 0 <= rank < num_replicas, got rank=3, num"):
        TextbookSampler(range(5), num_replicas=3, rank=3)


# ----------------------------------------------------------------------------- lessons

LESSONS = Path(__file__).resolve().parents[1] / "lessons"
SHOWING = {  # lesson -> textbook objects it prints with inspect.getsource
    "02_scatter_gather.py": {"minidp.textbook.dp.data_parallel_step"},
    "03_data_parallel.py": {
        "minidp.textbook.dp.parallel_apply",
        "minidp.textbook.dp.data_parallel_step",
    },
    "10_ddp_from_scratch.py": {"minidp.textbook.ddp.DistributedDataParallel"},
    "11_buckets_overlap.py": {
        "minidp.textbook.ddp.make_buckets",
        "minidp.textbook.ddp.DistributedDataParallel._grad_ready",
    },
    "12_distributed_sampler.py": {"minidp.textbook.sampler.DistributedSampler.__iter__"},
}


def shown_sources(path: Path) -> dict[str, object]:
    """Every ``inspect.getsource(X)`` in a lesson: X's dotted name resolved through the
    lesson's own imports -> the object itself."""
    tree = ast.parse(path.read_text())
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            aliases.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names})
        elif isinstance(node, ast.Import):
            aliases.update({a.asname or a.name: a.name for a in node.names})
    found = {}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and ast.unparse(node.func) == "inspect.getsource"
            and isinstance(node.args[0], ast.Attribute | ast.Name)
        ):
            head, *rest = ast.unparse(node.args[0]).split(".")
            name = ".".join([aliases.get(head, head), *rest])
            module_name, attrs = name, []
            while module_name not in sys.modules and "." in module_name:
                module_name, attr = module_name.rsplit(".", 1)
                attrs.insert(0, attr)
            obj = sys.modules.get(module_name)  # None: defined in the lesson itself
            for attr in attrs:
                obj = getattr(obj, attr, None)
            found[name] = obj
    return found


@pytest.mark.parametrize("lesson", sorted(SHOWING))
def test_lessons_show_the_real_textbook_functions(lesson):
    """The source a lesson prints is minidp's own function (``inspect.getsource`` of the
    imported object), not a copy pasted into the lesson."""
    import minidp.textbook.dp  # noqa: F401
    import minidp.textbook.sampler  # noqa: F401 -- resolvable in sys.modules

    text = (LESSONS / lesson).read_text()
    found = shown_sources(LESSONS / lesson)
    assert SHOWING[lesson] <= set(found), found
    for name in SHOWING[lesson]:
        obj = found[name]
        assert obj.__module__.startswith("minidp.") and "textbook" in obj.__module__
        assert inspect.getsource(obj) in Path(inspect.getfile(obj)).read_text()
        assert f"def {obj.__name__}(" not in text and f"class {obj.__name__}" not in text
