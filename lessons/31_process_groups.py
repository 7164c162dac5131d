# %% [markdown]
# # Lesson 31 — process groups: collectives over a subset of the ranks
#
# Run: `python lessons/31_process_groups.py`
#
# So far every collective ran over the whole world (`dist.group.WORLD`). `dist.new_group`
# builds a group of some of the ranks; a collective given `group=g` involves only them.
# That is how larger jobs combine kinds of parallelism (data parallel across one set of
# ranks, model parallel across another) and how two replicas can train side by side.
#
# Four rules, seen on 4 real rank processes with groups [0, 1] and [2, 3]:
# * **every rank calls `new_group` for every group, in the same order** — even for groups
#   it is not in. Each process names its groups from a counter ("1", "2", ...; the
#   members meet in the store under that name), so a rank that skips a call names every
#   *later* group one off: those groups pair up the wrong ranks or wait for partners that
#   never come. (In torch 2.13 `new_group` runs no barrier over the world unless
#   `TORCH_DIST_INIT_BARRIER=1`, so the skipped call itself does not block.)
#   `new_group(ranks, use_local_synchronization=True)` names a group by its ranks
#   instead, so only its members need to call it;
# * inside a group, ranks are renumbered from 0: global rank 2 is rank 0 of [2, 3]
#   (`dist.get_rank(g)`; `dist.get_process_group_ranks(g)` maps back);
# * `src` (broadcast, reduce, scatter) is a **global** rank, even on a subgroup: on [2, 3]
#   the second member is `src=3`, not 1 (torch >= 2.6 also takes `group_src=1` /
#   `group_dst=`, a rank *within* the group);
# * a non-member gets a placeholder (`GroupMember.NON_GROUP_MEMBER`); `get_rank` says -1
#   and a collective on it warns and does nothing.
#
# minidp's collectives accept the same groups: here `minidp.comm.all_reduce`, `all_gather`
# and `broadcast` on each subgroup against `torch.distributed`'s on the same subgroup.

# %%
import warnings

import kit
import torch
import torch.distributed as dist

import minidp

WORLD = 4
GROUPS = [[0, 1], [2, 3]]


def data(rank: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(100 + rank)
    return torch.randn(kit.pick(1000, 100), generator=g)  # (numel,) rank-local


def in_groups(rank: int, world: int) -> dict:
    """Every rank: build both groups, then reduce and gather within its own."""
    groups = [dist.new_group(ranks) for ranks in GROUPS]  # every rank, every group, same order
    mine = groups[rank // 2]
    other = groups[1 - rank // 2]
    x = data(rank)
    ours, theirs = x.clone(), x.clone()
    minidp.comm.all_reduce(ours, group=mine)
    dist.all_reduce(theirs, group=mine)
    gathered_ours = [torch.empty_like(x) for _ in range(2)]
    gathered_theirs = [torch.empty_like(x) for _ in range(2)]
    minidp.comm.all_gather(gathered_ours, x, group=mine)
    dist.all_gather(gathered_theirs, x, group=mine)
    # broadcast: src is a *global* rank, as in torch (3 is rank 1 of [2, 3]), not 1
    root = GROUPS[rank // 2][1]
    cast_ours, cast_theirs = x.clone(), x.clone()
    minidp.comm.broadcast(cast_ours, src=root, group=mine)
    dist.broadcast(cast_theirs, src=root, group=mine)
    # what a rank outside a group sees
    outside = x.clone()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        minidp.comm.all_reduce(outside, group=other)
        theirs_outside = x.clone()
        dist.all_reduce(theirs_outside, group=other)
    report = {
        "name": mine.group_name,  # from this process's counter: the i-th new_group call
        "group_rank": dist.get_rank(mine),
        "group_size": dist.get_world_size(mine),
        "members": dist.get_process_group_ranks(mine),
        "rank_in_other": dist.get_rank(other),
        "other_is_placeholder": other == dist.GroupMember.NON_GROUP_MEMBER,
        "sum": (ours, theirs),
        "gather": (gathered_ours, gathered_theirs),
        "broadcast": (cast_ours, cast_theirs),
        "outside_untouched": torch.equal(outside, x) and torch.equal(theirs_outside, x),
        "warnings": [str(w.message) for w in caught],
    }
    kit.say(
        rank,
        f"group {report['members']}: group rank {report['group_rank']} of "
        f"{report['group_size']}; in the other group: rank {report['rank_in_other']}",
    )
    for g in groups:
        if g != dist.GroupMember.NON_GROUP_MEMBER:
            dist.destroy_process_group(g)
    return report


# %% [markdown]
# ## 1. Four ranks, two groups
# Each rank reduces with its partner only: ranks 0 and 1 end with x0 + x1, ranks 2 and 3
# with x2 + x3.

# %%
if __name__ == "__main__":
    kit.title("Lesson 31: process groups — collectives over a subset of the ranks")
    reports = kit.spawn(in_groups, WORLD)
    xs = [data(r) for r in range(WORLD)]
    for r, rep in enumerate(reports):
        first = rep["sum"][0][:3].tolist()
        print(f"rank {r}: all_reduce over {rep['members']} -> {[round(v, 4) for v in first]} ...")
    print(f"rank 0, outside [2, 3]: warnings {reports[0]['warnings']}")
    print(f"group names, rank by rank: {[rep['name'] for rep in reports]} (the call's number)")

# %% [markdown]
# ## Checks
# A sum of two float tensors has one addition per element: minidp's `all_reduce` (at
# this size one direct exchange, `minidp/comm/direct.py`) and gloo's agree bit for bit,
# and both equal `x_a + x_b` computed here.

# %%
if __name__ == "__main__":
    for r, rep in enumerate(reports):
        kit.check(
            f"rank {r}: minidp all_reduce on its subgroup vs torch's", rep["sum"][0], rep["sum"][1]
        )
        kit.check(
            f"rank {r}: minidp all_gather on its subgroup vs torch's",
            rep["gather"][0],
            rep["gather"][1],
        )
    for r, rep in enumerate(reports):
        kit.check(
            f"rank {r}: minidp broadcast(src={GROUPS[r // 2][1]}, a global rank) vs torch's",
            rep["broadcast"][0],
            rep["broadcast"][1],
        )
    for members in GROUPS:
        a, b = members
        kit.check(
            f"group {members}: the broadcast delivers x{b} to rank {a}",
            reports[a]["broadcast"][0],
            xs[b],
        )
        kit.check(
            f"group {members}: the sum is x{a} + x{b} only", reports[a]["sum"][0], xs[a] + xs[b]
        )
    kit.check_true(
        "every rank named [0, 1] '1' and [2, 3] '2': non-members' calls count too",
        [rep["name"] for rep in reports] == ["1", "1", "2", "2"],
        str([rep["name"] for rep in reports]),
    )
    kit.check_true(
        "group ranks renumber from 0 (global 2 -> 0, 3 -> 1)",
        [rep["group_rank"] for rep in reports] == [0, 1, 0, 1],
    )
    kit.check_true(
        "a non-member gets the placeholder, rank -1, and its tensor untouched",
        all(
            rep["other_is_placeholder"] and rep["rank_in_other"] == -1 and rep["outside_untouched"]
            for rep in reports
        ),
    )
    kit.check_true(
        "both libraries warn a non-member (minidp with torch's message)",
        all(
            len(rep["warnings"]) == 2 and rep["warnings"][0] == rep["warnings"][1]
            for rep in reports
        ),
        reports[0]["warnings"][0] if reports[0]["warnings"] else "no warning",
    )
    kit.done()
