# %% [markdown]
# # Lesson 7 — the parameter server (naive all-reduce) and its traffic
#
# Run: `python lessons/07_parameter_server.py`
# Picture: `diagrams/traffic.png` (server vs ring bytes per rank, n = 2..16)
#
# The first all-reduce anyone writes: every rank sends its tensor to rank 0 (the
# "server"), rank 0 adds them up and sends the sum back. It is also what DataParallel's
# main device does with gradients (lesson 4).
#
# We measure, with `minidp.comm.count_traffic()`, the bytes each rank moves for a tensor
# of S bytes as the world grows. The articles say the server's traffic "grows linearly
# with the number of GPUs" — we check the exact number: rank 0 receives and sends
# `(n-1)·S`, every other rank `S`.
#
# Ranks are threads with real gloo groups (`minidp.launch.run_threads`): this lesson only
# needs minidp.comm, and a thread world of 8 starts in milliseconds.

# %%
import functools
import inspect

import kit
import torch
import torch.distributed as dist

import minidp
from minidp.comm import group as groups
from minidp.comm import naive

NUMEL = kit.pick(256 * 1024, 4096)  # float32 elements: S = 1 MiB (fast: 16 KiB)
S = NUMEL * 4
WORLDS = kit.pick([2, 3, 4, 6, 8], [2, 4, 8])


def rank_input(rank: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(100 + rank)  # threads share the global RNG: own generator
    return torch.randn(NUMEL, generator=g)


def server_all_reduce(rank: int, world: int) -> dict:
    x = rank_input(rank)
    with minidp.comm.count_traffic() as t:
        minidp.comm.naive_all_reduce(x)
    # Before any collective, minidp checks that every rank called the same one (a small
    # header from every rank to every other). barrier() is that check alone: measure it to
    # subtract it.
    with minidp.comm.count_traffic() as check:
        minidp.comm.barrier()
    ref = rank_input(rank)
    dist.all_reduce(ref, group=groups.resolve())  # gloo's own all-reduce, same inputs
    data = {
        "sent": t.sent_bytes - check.sent_bytes,
        "recv": t.recv_bytes - check.recv_bytes,
        "msgs": t.sent_msgs - check.sent_msgs,
    }
    return {"out": x, "gloo": ref, "data": data, "header": check.sent_bytes}


# %%
if __name__ == "__main__":
    kit.title("Lesson 7: parameter server (naive all-reduce) and its traffic")
    print(f"tensor: {NUMEL} float32 = S = {S} bytes per rank")
    print(
        f"{'n':>3} {'rank 0 sent':>13} {'rank 0 recv':>13} {'(n-1)*S':>11} "
        f"{'rank 1 sent':>12} {'rank 1 recv':>12}   (data bytes; header check apart)"
    )
    results = {}
    for n in WORLDS:
        res = minidp.launch.run_threads(server_all_reduce, n)
        results[n] = res
        d0, d1 = res[0]["data"], res[1]["data"]
        print(
            f"{n:>3} {d0['sent']:>13,} {d0['recv']:>13,} {(n - 1) * S:>11,} "
            f"{d1['sent']:>12,} {d1['recv']:>12,}"
        )
    print(
        f"header check (barrier alone) at n = {max(WORLDS)}: each rank sent "
        f"{results[max(WORLDS)][0]['header']} bytes — negligible next to S"
    )
    print("rank 0's link carries (n-1)x what any other rank's does: the bottleneck grows with n")


# %% [markdown]
# ## The parameter server in code
# minidp's own, printed from `minidp/comm/naive.py` (the real function): short enough to
# be its own textbook version. Beyond the bare idea it adds the cross-rank agreement check
# (`agree.agree`: mismatched calls raise on every rank), receives from all workers posted
# at once (added in rank order as they arrive), any reduce op, and non-contiguous tensors.

# %%
SHOWN = (naive.naive_all_reduce,)  # what this lesson prints

if __name__ == "__main__":
    for fn in SHOWN:
        print(inspect.getsource(fn))


# %% [markdown]
# ## Same sum, different bits
# Rank 0 adds the tensors in rank order: `((x0 + x1) + x2) + ...`. gloo's all-reduce adds
# them in a different order (a ring, lesson 8). Floating-point addition is not
# associative, so from 3 ranks on the two results differ in the last bits — both are
# "the sum". With integers they are identical.

# %%
if __name__ == "__main__":
    n = max(WORLDS)
    res = results[n]
    in_order = functools.reduce(torch.add, [rank_input(r) for r in range(n)])
    diff = (res[0]["out"] - res[0]["gloo"]).abs().max().item()
    print(f"n={n}: max |naive - gloo| = {diff:.3g}; naive == rank-order sum: ", end="")
    print(torch.equal(res[0]["out"], in_order))

    def int_all_reduce(rank: int, world: int):
        x = torch.arange(NUMEL, dtype=torch.int64) * (rank + 1)
        y = x.clone()
        minidp.comm.naive_all_reduce(x)
        dist.all_reduce(y, group=groups.resolve())
        return x, y

    ints = minidp.launch.run_threads(int_all_reduce, n)

# %% [markdown]
# ## Checks
# * traffic: rank 0 sends and receives exactly `(n-1)·S` bytes of data, the others `S`
#   (the header check measured on its own and subtracted);
# * result: bit-equal to the rank-order sum, close to gloo's all-reduce for floats,
#   bit-equal to gloo's for integers, and every rank ends with the same bits.

# %%
if __name__ == "__main__":
    for n, res in results.items():
        kit.check_true(
            f"n={n}: server sends and receives (n-1)*S = {(n - 1) * S:,} bytes, "
            f"every worker S = {S:,} each way",
            res[0]["data"]["sent"] == res[0]["data"]["recv"] == (n - 1) * S
            and all(r["data"]["sent"] == r["data"]["recv"] == S for r in res[1:]),
        )
    n = max(WORLDS)
    res = results[n]
    kit.check(f"n={n}: naive result vs rank-order sum ((x0+x1)+x2)+...", res[0]["out"], in_order)
    kit.check(
        f"n={n}: naive vs torch.distributed.all_reduce (float32)",
        res[0]["out"],
        res[0]["gloo"],
        exact=False,
    )
    kit.check(f"n={n}: naive vs torch.distributed.all_reduce (int64)", ints[0][0], ints[0][1])
    kit.check(
        f"n={n}: every rank holds the same bits", [r["out"] for r in res], [res[0]["out"]] * n
    )
    kit.done()

# %% [markdown]
# ## Your turn
# Write the parameter server's all-reduce through rank 0: edit `lessons/exercises/naive_all_reduce.py`, then check it against
# torch.distributed: `python -m minidp exercise check naive_all_reduce`

# %%
if __name__ == "__main__":
    print("\nExercise: edit lessons/exercises/naive_all_reduce.py, then check it against torch:")
    print("  python -m minidp exercise check naive_all_reduce")
