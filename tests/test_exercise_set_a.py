"""Three exercises — ``sync_batchnorm_stats``, ``clip_grad_norm_shards``, ``hsdp_reduce``:
the reference solution passes, the untouched stub says "not implemented yet", and each
classic wrong solution (``tests/exercise_wrong/NAME__WHAT.py``) fails with its own hint.

Run: ``pytest tests/test_exercise_set_a.py``

``WRONG`` and ``WRONG_RAISES`` have the rows of ``tests/test_exercises.py``'s tables, so that
file can count them for its "every exercise has wrong solutions" test.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from minidp.tools.exercise import check, find
from minidp.tools.exercise import report as printer
from minidp.tools.exercise.clip_grad_norm_shards import full_grads
from minidp.tools.exercise.clip_slips import shard
from minidp.tools.exercise.hsdp_reduce import HSDP_REDUCE, mesh, row_and_column

NAMES = ("sync_batchnorm_stats", "clip_grad_norm_shards", "hsdp_reduce")
WRONG_DIR = Path(__file__).resolve().parent / "exercise_wrong"

# (exercise, file tests/exercise_wrong/NAME__WHAT.py, the mistake its hint must name)
WRONG = [
    ("sync_batchnorm_stats", "mean_of_means", "mean of means"),
    ("sync_batchnorm_stats", "averaged_variances", "averaged the variances"),
    ("sync_batchnorm_stats", "unbiased", "unbiased variance"),
    ("sync_batchnorm_stats", "local_count", "count not all-reduced"),
    ("sync_batchnorm_stats", "local_only", "local statistics only"),
    ("sync_batchnorm_stats", "pooled_unweighted", "between-rank term unweighted"),
    ("sync_batchnorm_stats", "local_mean_squared", "mean² from the local mean"),
    ("sync_batchnorm_stats", "divided_by_world", "sums divided by the world size"),
    ("sync_batchnorm_stats", "local_variance", "variance over this rank's rows only"),
    ("clip_grad_norm_shards", "local_norm", "local norm only"),
    ("clip_grad_norm_shards", "summed_norms", "summed the norms"),
    ("clip_grad_norm_shards", "no_clamp", "no clamp to 1"),
    ("clip_grad_norm_shards", "inf_sum", "inf-norm summed"),
    ("clip_grad_norm_shards", "no_eps", "forgot the 1e-6"),
    ("clip_grad_norm_shards", "inf_no_abs", "inf-norm without abs()"),
    ("clip_grad_norm_shards", "copies", "clipped copies, shards unchanged"),
    ("clip_grad_norm_shards", "squares_averaged", "squares averaged over ranks"),
    ("clip_grad_norm_shards", "no_sqrt", "forgot the square root"),
    ("clip_grad_norm_shards", "squares_max", "sums of squares combined with max"),
    ("hsdp_reduce", "row_only", "forgot the replicas"),
    ("hsdp_reduce", "shard_size_only", "divided by the shard size only"),
    ("hsdp_reduce", "all_reduce_rows", "all-reduced the full gradient"),
    ("hsdp_reduce", "averaged_twice", "averaged twice"),
    ("hsdp_reduce", "no_divide", "forgot to average"),
    ("hsdp_reduce", "padding_kept", "padding rows left in"),
    ("hsdp_reduce", "swapped_groups", "mesh groups swapped"),
    ("hsdp_reduce", "tensor_split_rows", "tensor_split's rows, not torch.chunk's"),
]
# wrong solutions that raise on a rank: the hint comes from the error
WRONG_RAISES = [
    ("hsdp_reduce", "group_allreduce", "called a collective on a mesh group"),
    ("hsdp_reduce", "no_padding", "pieces of different sizes"),
]


@pytest.mark.parametrize("name", NAMES)
def test_reference_solution_passes(name):
    exercise = find(name)
    rep = check(exercise, exercise.solution, generated=2)
    assert rep.passed, printer.summary(rep)
    worlds = {o.case["world"] for o in rep.outcomes}
    assert {1, 2} <= worlds and worlds & {3, 5}, worlds


@pytest.mark.parametrize("name", NAMES)
def test_untouched_stub_is_not_implemented_yet(name):
    rep = check(find(name))
    assert rep.failure.status == "todo" and len(rep.outcomes) == 1
    assert "not implemented yet" in printer.summary(rep)


@pytest.mark.parametrize("name,what,mistake", WRONG, ids=[f"{n}-{w}" for n, w, _ in WRONG])
def test_classic_wrong_solution_fails_with_its_hint(name, what, mistake):
    rep = check(find(name), WRONG_DIR / f"{name}__{what}.py", generated=0)
    text = printer.summary(rep)
    assert not rep.passed and rep.failure.status == "wrong", text
    assert rep.failure.mistake is not None and rep.failure.mistake.name == mistake, text
    assert f"hint ({mistake}): " in text and "expected" in text and "got" in text
    # shrunk from the first case this mistake was recognised in, never grown (hsdp_reduce
    # recognises a scale slip only where its factor is unambiguous: not always the first)
    first = next(o for o in rep.outcomes if o.mistake == rep.failure.mistake)
    assert rep.failure.case["world"] <= first.case["world"]


@pytest.mark.parametrize(
    "name,what,mistake", WRONG_RAISES, ids=[f"{n}-{w}" for n, w, _ in WRONG_RAISES]
)
def test_wrong_solution_that_raises_fails_with_its_hint(name, what, mistake):
    rep = check(find(name), WRONG_DIR / f"{name}__{what}.py", generated=0, deadline=3)
    text = printer.summary(rep)
    assert rep.failure.status == "error" and rep.failure.mistake.name == mistake, text
    assert f"hint ({mistake}): " in text and "raised" in text


def test_every_wrong_solution_is_on_disk_and_tested():
    rows = WRONG + WRONG_RAISES
    for name in NAMES:
        assert sum(n == name for n, _, _ in rows) >= 5, name  # the classic ones and newer
    on_disk = {p.stem for p in WRONG_DIR.glob("*.py") if p.stem.split("__")[0] in NAMES}
    assert on_disk == {f"{n}__{w}" for n, w, _ in rows}


def test_patching_torchs_clip_code_in_the_sandbox_cannot_pass(tmp_path):
    """The reference is computed in the judge's process: a file that patches torch's
    clip_grad_norm_ (outside the seal) and clips nothing changes only the sandbox's copy."""
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
        parts = [shard(t, 4, r) for r in range(4)]
        assert torch.equal(torch.cat(parts), t)
    assert shard(full_grads(case)[0], 4, 3).shape == (0,)  # 3 rows on 4 ranks: one empty


def test_hsdp_mesh_is_row_major_like_init_device_mesh():
    case = {"world": 6, "replicate": 2}
    assert mesh(case) == (2, 3)
    assert row_and_column(4, 2, 3) == ([3, 4, 5], [1, 4])  # rank 4: row [3, 4, 5], column [1, 4]
    assert HSDP_REDUCE.traffic is not None  # bytes are counted: a full all-reduce fails
