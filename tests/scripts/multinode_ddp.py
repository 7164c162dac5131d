"""A small minidp DDP training run, the same under ``torchrun`` (any number of nodes) and
inside an existing world (``tests/test_multinode.py`` runs it both ways).

    torchrun --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d \
             --rdzv-endpoint 127.0.0.1:PORT --rdzv-id ID tests/scripts/multinode_ddp.py OUT.pt

Rank 0 writes ``{"state": model state_dict, "ranks": (world, 3) int64}`` to ``OUT.pt``
(the argument, or the ``MINIDP_MULTINODE_OUT`` environment variable); ``ranks`` holds
every rank's (RANK, GROUP_RANK, LOCAL_RANK), so the test can see the job really spanned
two nodes. Everything is seeded with explicit generators: every launch trains the same
bits.
"""

from __future__ import annotations

import os
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import minidp

SAMPLES, BATCH, EPOCHS = 256, 8, 2


def make_model() -> nn.Sequential:
    g = torch.Generator().manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)
    return model


def train(rank: int, world: int, out: str | None = None) -> None:
    """Train on this rank's share; rank 0 saves the final weights to ``out``."""
    torch.set_num_threads(1)  # the same kernels whoever launched us
    g = torch.Generator().manual_seed(1)
    x = torch.randn(SAMPLES, 16, generator=g)
    data = TensorDataset(x, (x[:, :4] - x[:, 4:8]).argmax(1))
    sampler = minidp.DistributedSampler(data, shuffle=True, seed=5)
    loader = DataLoader(data, batch_size=BATCH, sampler=sampler)
    ddp = minidp.DistributedDataParallel(make_model())
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(ddp(xb), yb).backward()
            opt.step()
    who = torch.tensor([int(os.environ.get(k, -1)) for k in ("RANK", "GROUP_RANK", "LOCAL_RANK")])
    table = [torch.empty_like(who) for _ in range(world)]
    minidp.comm.all_gather(table, who)
    if rank == 0:
        path = out or os.environ["MINIDP_MULTINODE_OUT"]
        torch.save({"state": ddp.module.state_dict(), "ranks": torch.stack(table)}, path)
    minidp.comm.barrier()  # nobody exits before rank 0 has written


if __name__ == "__main__":
    target = sys.argv[1] if len(sys.argv) > 1 else None
    if minidp.launch.launched_by_torchrun():
        minidp.launch.launch(train, int(os.environ["WORLD_SIZE"]), target)
    else:
        minidp.launch.spawn(train, 4, target)
