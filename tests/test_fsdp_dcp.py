"""Sharded DCP checkpoints through torch's own API, minidp against FSDP2, across world sizes.

minidp has no checkpoint code of its own: its parameters are DTensors, so torch's
``get_model_state_dict``/``get_optimizer_state_dict``, ``dcp.save``/``dcp.load`` and
``set_*_state_dict`` run on it exactly as on FSDP2 (``fsdp_dcp_runners.save``/``load``).

* 2 -> 3: minidp trains 2 steps at 2 ranks beside FSDP2 and saves; at 3 ranks a fresh
  FSDP2 and a fresh minidp load it: equal to each other (parameters, shards, AdamW state)
  and to what was saved right after loading, then for 2 more steps side by side
  (``torch.equal``).
* 3 -> 2: the same with FSDP2 saving at 3 ranks and both loading at 2.
* The layout: the checkpoints' metadata lists, per tensor, exactly minidp's shards (13 rows
  at 2 ranks: rows 0-6 and 7-12; FSDP2's at 3 ranks: 5 + 5 + 3, the same rule).
* The mutation that must break it: minidp loading the model but not the optimizer state.
* Bad input: a missing directory, another model's checkpoint, a data file gone, an
  optimizer checkpoint of another kind: the same failure as FSDP2's.
* ``-m slow``: HSDP (2 x 2 mesh) loads the 2-rank checkpoint, saves its own, and 1-D
  3-rank FSDP2 and minidp load that.

One process world per size; each runs all its cases in one call (the 2-rank world twice:
before and after the 3-rank one). Run: ``pytest tests/test_fsdp_dcp.py``
"""

from __future__ import annotations

import pytest
from fsdp_dcp_runners import at_four_hsdp, at_three, load_and_resume, train_and_save
from helpers import FSDP2_UNUSABLE

pytestmark = pytest.mark.skipif(FSDP2_UNUSABLE is not None, reason=FSDP2_UNUSABLE or "")


@pytest.fixture(scope="module")
def runs(process_world, tmp_path_factory):
    """minidp saves at 2 -> both load at 3, FSDP2 saves at 3 -> both load at 2."""
    tmp = tmp_path_factory.mktemp("dcp")
    minidp_dir, fsdp2_dir = str(tmp / "minidp_w2"), str(tmp / "fsdp2_w3")
    at_two = process_world(2).run(train_and_save, "minidp", minidp_dir)
    three = process_world(3).run(at_three, minidp_dir, at_two[0], fsdp2_dir, str(tmp))
    back = process_world(2).run(load_and_resume, fsdp2_dir, three[0]["fsdp2_saved"])
    return {
        "at_two": at_two,
        "three": three,
        "back": back,
        "minidp_dir": minidp_dir,
        "fsdp2_dir": fsdp2_dir,
    }


def _unequal(rows) -> list:
    return [r for r in rows if r[3] != 0.0]


def test_saving_side_trains_like_fsdp2(runs):
    """Before any checkpoint: both sides equal at 2 and 3 ranks, and the DTensors minidp hands
    DCP rebuild (DTensor's own all-gather) the full parameters."""
    saves = [r["rows"] for r in runs["at_two"]] + [t["fsdp2_saved"]["rows"] for t in runs["three"]]
    for rows in saves:
        assert rows and _unequal(rows) == [], _unequal(rows)[:5]
        assert any(r[2] == "dtensor" for r in rows)


def test_minidp_checkpoint_at_two_ranks_resumes_at_three_in_fsdp2_and_minidp(runs):
    for rank, result in enumerate(runs["three"]):
        rows = result["resumed"]
        whats = {r[2] for r in rows}
        assert {"full", "shard", "grad", "exp_avg", "exp_avg_sq", "step", "saved"} <= whats
        assert {"saved exp_avg", "saved step"} <= whats
        assert _unequal(rows) == [], (
            f"rank {rank}: (step, tensor, what, diff): {_unequal(rows)[:5]}"
        )


def test_fsdp2_checkpoint_at_three_ranks_resumes_at_two_in_minidp(runs):
    for rank, rows in enumerate(runs["back"]):
        assert {"exp_avg", "saved", "saved exp_avg_sq"} <= {r[2] for r in rows}
        assert _unequal(rows) == [], (
            f"rank {rank}: (step, tensor, what, diff): {_unequal(rows)[:5]}"
        )


def _chunks(path: str) -> dict[str, list[tuple]]:
    """{key: sorted (offsets, sizes) of its saved chunks}, from DCP's metadata (public)."""
    import torch.distributed.checkpoint as dcp

    meta = dcp.FileSystemReader(path).read_metadata().state_dict_metadata
    return {
        k: sorted((tuple(c.offsets), tuple(c.sizes)) for c in m.chunks)
        for k, m in meta.items()
        if hasattr(m, "chunks")
    }


@pytest.mark.parametrize("saver, world", [("minidp", 2), ("fsdp2", 3)])
def test_checkpoint_layout_is_minidps_shards(runs, saver, world):
    """Per tensor, one chunk per rank: rank r's rows under the torch.chunk rule minidp shards
    by — for minidp's own checkpoint (13 rows at 2 ranks: 7 + 6) and for FSDP2's (DTensor's
    Shard(0) at 3 ranks: 5 + 5 + 3, the same rule). The optimizer state under FSDP2's keys
    (``optim.state.<name>.exp_avg`` sharded alike; ``step`` whole, once)."""
    from minidp.fsdp.shard import shard_length, shard_rows

    chunks = _chunks(runs[f"{saver}_dir"])
    full = runs["at_two"][0]["full"]  # the shapes (tied head.weight: emb.weight's)
    shapes = {**{n: t.shape for n, t in full.items()}, "head.weight": full["emb.weight"].shape}
    for name, shape in shapes.items():
        rows = shard_rows(shape[0], world)
        want = [
            ((r * rows, *[0] * (len(shape) - 1)), (shard_length(shape[0], world, r), *shape[1:]))
            for r in range(world)
            if shard_length(shape[0], world, r)
        ]
        keys = [f"model.{name}"] + [f"optim.state.{name}.exp_avg"] * (name != "head.weight")
        for key in keys:
            assert chunks[key] == want, (key, chunks[key], want)
    assert chunks["optim.state.emb.weight.step"] == [((), ())]


def test_loading_the_model_without_the_optimizer_breaks_equality(runs):
    """Mutation: minidp loads only the model (fresh AdamW state) while FSDP2 loads both. The
    parameters are still equal right after loading; the optimizer-state rows and every
    trained step after it must differ — the comparisons above can fail."""
    for rank, result in enumerate(runs["three"]):
        rows = result["model_only"]
        loaded = [r for r in rows if r[0] == -1 and r[2] in ("full", "shard", "saved")]
        assert loaded and _unequal(loaded) == []
        assert _unequal([r for r in rows if r[0] == -1 and r[2] == "exp_avg"])
        trained = [r for r in rows if r[0] >= 0 and r[2] == "full"]
        assert len(_unequal(trained)) == len(trained), f"rank {rank}: some parameter equal"


def _same_failure(case: str, runs) -> list[str]:
    """FSDP2's and minidp's failures of ``case`` on every rank: the same exception type and
    first line, both before anything was overwritten (or both after). Returns the messages."""
    said = []
    for rank, r in enumerate(runs["three"]):
        (theirs, t_said, theirs_wrote), (ours, o_said, ours_wrote) = r["errors"][case]
        assert theirs is not None and ours == theirs, (rank, case, theirs, ours, o_said[:300])
        first = [m.strip().splitlines()[0] if m.strip() else "" for m in (t_said, o_said)]
        assert first[0] == first[1], (rank, case, first)
        assert ours_wrote == theirs_wrote, (rank, case, ours_wrote, theirs_wrote)
        said.append(o_said)
    return said


@pytest.mark.parametrize("case", ["missing_dir", "other_shape", "missing_key", "missing_file"])
def test_a_bad_load_fails_as_it_does_on_fsdp2(runs, case):
    """A missing directory, another model's checkpoint (another shape, a missing key), a
    rank's data file gone: torch's own calls raise the same on minidp's model as on FSDP2's.
    (main: minidp had its own loader, with its own words.)"""
    _same_failure(case, runs)


@pytest.mark.parametrize(
    "case, names",
    [
        ("adamw_into_sgd", "Missing key in checkpoint state_dict: optim.state.emb.weight.momentum"),
        ("sgd_into_adamw", "Missing key in checkpoint state_dict: optim.state.emb.weight.step"),
    ],
)
def test_an_optimizer_checkpoint_of_another_kind_fails_as_torch_before_any_write(runs, case, names):
    """AdamW's checkpoint into SGD(momentum), SGD's into AdamW: refused as FSDP2's are,
    naming the missing state, before any parameter is overwritten. (main: minidp's loader
    accepted AdamW's state into SGD — lr 0.001, weight_decay 0.01, exp_avg — and loaded the
    model, then failed SGD -> AdamW with a bare KeyError: 'step'.)"""
    for said, r in zip(_same_failure(case, runs), runs["three"]):
        assert names in said, said[:300]
        assert r["errors"][case][1][2] is False, "minidp's model was overwritten"


@pytest.mark.slow  # a 4-rank world: about 10 s more on 2 cores
def test_hsdp_checkpoint_2x2_resumes_at_three_and_loads_the_two_rank_one(
    runs, process_world, tmp_path
):
    """HSDP, mesh (replicate=2, shard=2), placements [Replicate(), Shard(0)]: FSDP2 and minidp
    load minidp's 2-rank checkpoint and train on; minidp saves its own HSDP run, DCP keeps
    one copy of the replicas' chunks (2 per tensor, not 4), and 1-D 3-rank FSDP2 and minidp
    load it: equal throughout, bit for bit."""
    import torch.distributed.checkpoint as dcp

    hsdp_dir = str(tmp_path / "minidp_hsdp_2x2")
    four = process_world(4).run(at_four_hsdp, runs["minidp_dir"], runs["at_two"][0], hsdp_dir)
    for rank, result in enumerate(four):
        for rows in (result["resumed"], result["saved"]["rows"]):
            assert rows and _unequal(rows) == [], f"rank {rank}: {_unequal(rows)[:5]}"
    meta = dcp.FileSystemReader(hsdp_dir).read_metadata().state_dict_metadata
    assert [tuple(c.sizes) for c in meta["model.emb.weight"].chunks] == [(7, 10), (6, 10)]
    for rank, rows in enumerate(process_world(3).run(load_and_resume, hsdp_dir, four[0]["saved"])):
        assert {"exp_avg", "saved"} <= {r[2] for r in rows}
        assert _unequal(rows) == [], f"rank {rank}: {_unequal(rows)[:5]}"
