# %% [markdown]
# # Lesson 27 — model parallel vs data parallel: what each one splits
#
# Run: `python lessons/27_model_vs_data_parallel.py`
#
# **Data parallel** (DP, DDP — every lesson so far) copies the *whole model* to every rank
# and splits the *batch*; the ranks exchange *gradients* (one all-reduce of every
# parameter per step). **Model parallel** splits the *model*: here layer 1 lives on rank 0
# and layers 2–3 on rank 1 (a two-stage pipeline). The whole batch goes through both; the
# ranks exchange *activations* forward and *activation gradients* backward.
#
# | | data parallel | model parallel (2 stages) |
# |---|---|---|
# | parameters per rank | all of them | its stage's only |
# | batch per rank | batch / world | the whole batch |
# | sent per step | gradients: 2(n-1)/n · parameters | activations + their gradients at the cut |
# | ranks busy | all the time | one at a time (the other waits: the "bubble") |
#
# Model parallelism is for models that do not fit on one device; pipelines (GPipe,
# `torch.distributed.pipelining`) cut the batch into micro-batches to fill the bubble.
#
# A pipeline cuts the model *between* layers. The other way to split a model is **tensor
# parallelism** (Megatron-LM): cut *each* big layer, so every rank holds a slice of every
# weight and all ranks work on the same layer at once. In a transformer's MLP, the first
# weight is cut by columns and the second by rows; each rank computes its part of the
# hidden layer with no communication, and one all-reduce per MLP sums the partial outputs
# (and one more in backward). It moves activations at every layer, so it stays inside a
# node with fast links; pipelines and data parallelism span the nodes
# (`torch.distributed.tensor.parallel`: `ColwiseParallel`, `RowwiseParallel`).
#
# ```text
#   pipeline (this lesson)            tensor parallel (Megatron MLP, 2 ranks)
#   rank 0: x -> [layer 1] --act-->     x --+--> x·A[:, :h/2] -> gelu -> ·B[:h/2, :] --+
#   rank 1:        --act--> [layers 2-3]    |    (rank 0)                               +-> all-reduce -> y
#           <-- grad of act --              +--> x·A[:, h/2:] -> gelu -> ·B[h/2:, :] --+
#                                                (rank 1)
# ```
#
# Both run here on two real rank processes, on the same model and batch, measured with
# `minidp.comm.count_traffic`. The pipeline sends with minidp's point-to-point
# (`minidp.comm.p2p.send`/`recv`, the primitive all its collectives are built from).

# %%
import kit
import torch
import torch.distributed as dist
from torch import nn

import minidp
from minidp.comm import p2p

WORLD, BATCH = 2, kit.pick(256, 64)


def one_process(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple:
    """The reference: the whole model, the whole batch, one process."""
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    return loss.detach(), [p.grad for p in model.parameters()]


def pipeline(rank: int, model: nn.Sequential, x: torch.Tensor, y: torch.Tensor) -> dict:
    """Stage 0 (layer 1 + tanh) on rank 0, stage 1 (the rest) on rank 1."""
    group = dist.group.WORLD
    stage = model[:2] if rank == 0 else model[2:]  # this rank's layers only
    act = torch.empty(len(x), model[0].out_features)  # (batch, 64) the activations at the cut
    with minidp.comm.count_traffic() as traffic:
        if rank == 0:
            act = stage(x)
            p2p.send(act.detach().contiguous(), 1, group)  # forward: activations to stage 1
            grad = torch.empty_like(act)
            p2p.recv(grad, 1, group)  # backward: d loss / d activations from stage 1
            act.backward(grad)
            loss = torch.zeros(())
        else:
            p2p.recv(act, 0, group)
            act.requires_grad_(True)  # a leaf here: its .grad is what rank 0 needs
            loss = nn.functional.cross_entropy(stage(act), y)
            loss.backward()
            p2p.send(act.grad, 0, group)
    return {
        "params": sum(p.numel() for p in stage.parameters()),
        "grads": [p.grad for p in stage.parameters()],
        "loss": loss.detach(),
        "sent": traffic.sent_bytes,
    }


def data_parallel(rank: int, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict:
    """DDP's step written out (lesson 10): half the batch, then one all-reduce of the
    gradients, divided by the world size. (minidp's DDP does the same in buckets, on a
    communication thread whose traffic this thread's counter would not see.)"""
    xs, ys = x.chunk(WORLD)[rank], y.chunk(WORLD)[rank]  # this rank's half of the batch
    nn.functional.cross_entropy(model(xs), ys).backward()
    grads = [p.grad for p in model.parameters()]
    flat = torch.cat([g.flatten() for g in grads])  # (parameters,) rank-local
    with minidp.comm.count_traffic() as traffic:
        minidp.comm.all_reduce(flat)
    # Before a collective minidp checks that every rank called the same one (a small
    # header from every rank to every other); barrier() is that check alone: measure it
    # to subtract it.
    with minidp.comm.count_traffic() as check:
        minidp.comm.barrier()
    flat /= WORLD
    for g, piece in zip(grads, flat.split([g.numel() for g in grads])):
        g.copy_(piece.view_as(g))
    return {
        "params": sum(p.numel() for p in model.parameters()),
        "grads": grads,
        "sent": traffic.sent_bytes - check.sent_bytes,
    }


def rank_main(rank: int, world: int) -> dict:
    x, y = kit.make_data(BATCH)
    return {
        "pipeline": pipeline(rank, kit.make_model(), x, y),
        "dp": data_parallel(rank, kit.make_model(), x, y),
    }


# %% [markdown]
# ## 1. One process: the reference gradients

# %%
if __name__ == "__main__":
    kit.title("Lesson 27: model parallel vs data parallel — what each one splits")
    model = kit.make_model()
    print(model)
    x, y = kit.make_data(BATCH)
    ref_loss, ref_grads = one_process(model, x, y)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"one process: loss {ref_loss:.6f}, {n_params} parameters, batch {BATCH}")

# %% [markdown]
# ## 2. Both on two rank processes

# %%
if __name__ == "__main__":
    pp, dp = zip(*[(r["pipeline"], r["dp"]) for r in kit.spawn(rank_main, WORLD)])
    print(f"\n{'':24}{'data parallel':>16}{'model parallel':>16}")
    for r in range(WORLD):
        print(f"{f'rank {r} parameters':24}{dp[r]['params']:>16}{pp[r]['params']:>16}")
    for r in range(WORLD):
        print(f"{f'rank {r} bytes sent':24}{dp[r]['sent']:>16}{pp[r]['sent']:>16}")
    act_bytes = BATCH * model[0].out_features * 4
    print(
        f"pipeline: {BATCH}x{model[0].out_features} float32 activations = {act_bytes} bytes "
        f"each way; DDP: 2(n-1)/n x {n_params} x 4 bytes = {n_params * 4} bytes per rank"
    )
    print("the pipeline's bytes grow with the batch; DDP's with the model")

# %% [markdown]
# ## Checks
# The pipeline computes exactly the one-process arithmetic (the same matmuls on the same
# shapes, only on two processes): bit-for-bit. Data parallel splits the batch, so its averaged
# gradients add up in another order: equal up to float32 rounding (`assert_close`
# defaults for one step).

# %%
if __name__ == "__main__":
    kit.check("pipeline loss (rank 1) vs one process", pp[1]["loss"], ref_loss)
    kit.check(
        "pipeline gradients (rank 0's stage + rank 1's) vs one process",
        pp[0]["grads"] + pp[1]["grads"],
        ref_grads,
    )
    kit.check("data-parallel gradients vs one process", dp[0]["grads"], ref_grads, exact=False)
    kit.check_true(
        "the pipeline holds each parameter on one rank only",
        pp[0]["params"] + pp[1]["params"] == n_params and dp[0]["params"] == n_params,
    )
    kit.check_true(
        "pipeline bytes = the activations (rank 0) and their gradients (rank 1)",
        pp[0]["sent"] == pp[1]["sent"] == act_bytes,
        f"{pp[0]['sent']}, {pp[1]['sent']} vs {act_bytes}",
    )
    kit.check_true(
        "data parallel sends 2(n-1)/n x parameters x 4 bytes per rank",
        dp[0]["sent"] == dp[1]["sent"] == 2 * (WORLD - 1) * n_params * 4 // WORLD,
        f"{dp[0]['sent']} bytes",
    )
    kit.done()
