"""Train a small classifier with minidp's DistributedDataParallel on 2 ranks.

    python examples/ddp_train.py                       # starts its own 2 rank processes
    torchrun --nproc-per-node 2 examples/ddp_train.py  # the same file, unchanged

Each rank reads its own share of the data (``DistributedSampler``), runs forward and
backward on it, and ``DistributedDataParallel`` averages the gradients during backward,
so every rank takes the same optimizer step and the replicas stay identical — the
script checks that at the end.

Test: ``pytest tests/test_ddp_misc.py -k example``
"""

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import minidp


def make_data(n: int = 2048) -> TensorDataset:
    g = torch.Generator().manual_seed(0)  # the same dataset on every rank
    x = torch.randn(n, 20, generator=g)
    y = (x[:, :10].sum(1) > x[:, 10:].sum(1)).long()  # a learnable rule
    return TensorDataset(x, y)


def train(rank: int, world_size: int, epochs: int = 3) -> float:
    torch.manual_seed(rank)  # different start on each rank: DDP broadcasts rank 0's weights
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 2))
    model = minidp.DistributedDataParallel(model)
    data = make_data()
    sampler = minidp.DistributedSampler(data, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=64, sampler=sampler)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)  # a new shuffle every epoch, the same on every rank
        total, correct = 0.0, 0
        for x, y in loader:
            opt.zero_grad()
            out = model(x)
            loss = nn.functional.cross_entropy(out, y)
            loss.backward()  # gradients are averaged across ranks here
            opt.step()
            total += loss.item() * len(y)
            correct += (out.argmax(1) == y).sum().item()
        if rank == 0:
            n = len(sampler)
            print(
                f"epoch {epoch}: loss {total / n:.4f}, accuracy {correct / n:.1%} (rank 0's share)"
            )
    # Every replica took the same steps: the parameters must be identical everywhere.
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    copies = [torch.empty_like(flat) for _ in range(world_size)]
    dist.all_gather(copies, flat)
    same = all(torch.equal(c, flat) for c in copies)
    if rank == 0:
        print(f"replicas identical on all {world_size} ranks: {same}")
    return total / len(sampler)


if __name__ == "__main__":
    minidp.launch.launch(train, 2)
