"""``sync_batchnorm_stats``, ``clip_grad_norm_shards``, ``hsdp_reduce``: what their checks
rest on — shards cut like torch.chunk (empty ones too), the HSDP mesh row-major like
``init_device_mesh``, and a reference the sandbox cannot patch.

Run: ``pytest tests/test_exercise_set_a.py``

Solutions, stubs, slips and wrong solutions: ``tests/test_exercises.py``.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from minidp.launch import run_threads
from minidp.tools.exercise import check, find
from minidp.tools.exercise import report as printer
from minidp.tools.exercise.learner_group import PostOffice, View, Wire
from minidp.tools.exercise.specs.clip_grad_norm_shards import full_grads, shard
from minidp.tools.exercise.specs.hsdp_reduce import mesh


def test_patching_torchs_clip_code_in_the_sandbox_cannot_pass(tmp_path):
    """The reference is computed in the judge's process: a file that patches torch's
    clip code (outside the seal) and clips nothing changes only the sandbox's copy."""
    patch = (
        "import torch.nn.utils.clip_grad as c\n"
        "c._get_total_norm = lambda *a, **k: 0\n"
        "def clip_grad_norm_shards(shards, max_norm, norm_type, group):\n"
        "    return 0.0\n"
    )
    (tmp_path / "clip_grad_norm_shards.py").write_text(patch)
    rep = check(find("clip_grad_norm_shards"), tmp_path / "clip_grad_norm_shards.py", generated=0)
    assert not rep.passed and rep.failure.status == "wrong", printer.summary(rep)


def test_clip_shards_follow_torch_chunk_including_empty_ones():
    case = {"world": 4, "shapes": ((3,), (5, 2)), "max_norm": 1.0, "norm_type": 2.0, "seed": 0}
    for t in full_grads(case):
        assert torch.equal(torch.cat([shard(t, 4, r) for r in range(4)]), t)
    assert shard(full_grads(case)[0], 4, 3).shape == (0,)  # 3 rows on 4 ranks: one empty


def _row_and_column(rank: int, world: int) -> list:
    me = SimpleNamespace(rank=lambda: rank)  # a thread rank's group, as far as views ask
    group = View(Wire(me, PostOffice()), list(range(world)))
    row, col = mesh(group, {"replicate": 2}, rank, world)
    return [row._ranks, col._ranks, row.rank(), col.rank()]


def test_hsdp_mesh_is_row_major_like_init_device_mesh():
    # 2 x 3: rank 4 is in row [3, 4, 5] (shard rank 1) and column [1, 4] (replicate rank 1)
    assert _row_and_column(4, 6) == [[3, 4, 5], [1, 4], 1, 1]
    assert find("hsdp_reduce").traffic is not None  # bytes are counted: a full all-reduce fails
    assert any(c["world"] // c["replicate"] >= 4 for c in find("hsdp_reduce").cases)


def _mutated(rank: int, world: int):
    """The sync_batchnorm_stats harness hands the learner the caller's own x, and reads it
    back after the call: an in-place change is seen."""
    from minidp.tools.exercise.specs.sync_batchnorm_stats import learn

    def centre(x, group):
        x -= x.mean(0)
        return x.mean(0), x.var(0)

    return learn(centre, {"sizes": (3,), "channels": 2, "seed": 0}, 0, 1, None)[-1]


def test_a_mutated_input_comes_back_to_the_judge():
    (after,) = run_threads(_mutated, 1)
    assert after.mean(0).abs().max() < 1e-12  # centred: the rows given were changed
