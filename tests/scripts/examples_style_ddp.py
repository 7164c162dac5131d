"""A training script written the way pytorch/examples' DDP tutorial series writes them.

    torchrun --standalone --nproc-per-node 2 tests/scripts/examples_style_ddp.py \
        --epochs 2 --snapshot snap.pt --losses run

What a real loop does at once: ``torchrun`` and ``LOCAL_RANK``, a ``Trainer`` class, a
``DistributedSampler`` with ``set_epoch``, gradient accumulation with ``no_sync``,
``clip_grad_norm_``, an LR scheduler, ``ZeroRedundancyOptimizer`` beside DDP, uneven
data under ``Join`` (each rank stops after its own number of batches), and a snapshot
that a second launch resumes from. ``--device cuda`` puts each rank on a GPU with
``device_ids=[local_rank]`` (ranks beyond the GPU count share them, on gloo).

``tests/test_real_scripts.py`` runs it twice: as written (torch's classes), and with the
three import lines marked below replaced by one line importing minidp's — nothing else
changes — and asserts the same losses and snapshots, bit for bit. Each rank writes its
losses to ``<losses>.rank<r>.pt``.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.nn.functional as F
from torch.distributed import destroy_process_group, init_process_group
from torch.distributed.algorithms.join import Join
from torch.utils.data import DataLoader, Dataset

# isort: split
# -- the classes a user swaps (BEGIN) --
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data.distributed import DistributedSampler

# -- the classes a user swaps (END) --


class MyTrainDataset(Dataset):
    def __init__(self, size: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.data = [(torch.rand(20, generator=g), torch.rand(1, generator=g)) for _ in range(size)]

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int):
        return self.data[index]


def ddp_setup(device: str) -> None:
    init_process_group(backend="gloo")  # gloo: CPU ranks, or several ranks on one GPU
    if device == "cuda":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count())


class Trainer:
    def __init__(self, model, train_data, args) -> None:
        self.local_rank = int(os.environ["LOCAL_RANK"])
        self.global_rank = int(os.environ["RANK"])
        self.args = args
        self.device = (
            torch.device("cuda", self.local_rank % torch.cuda.device_count())
            if args.device == "cuda"
            else torch.device("cpu")
        )
        self.model = model.to(self.device)
        self.train_data = train_data
        self.epochs_run = 0
        self.losses: list[torch.Tensor] = []
        snapshot = None
        if os.path.exists(args.snapshot):
            print(f"rank {self.global_rank}: loading snapshot {args.snapshot}")
            snapshot = torch.load(args.snapshot, map_location=self.device, weights_only=True)
            self.model.load_state_dict(snapshot["MODEL_STATE"])
            self.epochs_run = snapshot["EPOCHS_RUN"]
        ids = [self.device.index] if self.device.type == "cuda" else None
        self.model = DDP(self.model, device_ids=ids)
        self.optimizer = ZeroRedundancyOptimizer(
            self.model.parameters(), torch.optim.AdamW, lr=3e-3, weight_decay=0.01
        )
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=3, gamma=0.7)
        if snapshot is not None:
            self.optimizer.load_state_dict(snapshot["OPTIMIZER_STATE"])
            self.scheduler.load_state_dict(snapshot["SCHEDULER_STATE"])

    def _run_batch(self, source, targets, sync: bool) -> None:
        if sync:
            output = self.model(source)
            loss = F.mse_loss(output, targets) / self.args.accumulate
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm=0.5)
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        else:
            with self.model.no_sync():  # accumulate locally: no all-reduce
                output = self.model(source)
                loss = F.mse_loss(output, targets) / self.args.accumulate
                loss.backward()
        self.losses.append(loss.detach().cpu())

    def _run_epoch(self, epoch: int) -> None:
        self.train_data.sampler.set_epoch(epoch)
        # uneven data: rank r stops r batches early (ranks that run out shadow the rest)
        stop = len(self.train_data) - self.global_rank
        for i, (source, targets) in enumerate(self.train_data):
            if i >= stop:
                break
            source, targets = source.to(self.device), targets.to(self.device)
            self._run_batch(source, targets, sync=(i + 1) % self.args.accumulate == 0)
        self.scheduler.step()

    def _save_snapshot(self, epoch: int) -> None:
        self.optimizer.consolidate_state_dict(to=0)  # every rank takes part
        if self.global_rank == 0:
            snapshot = {
                "MODEL_STATE": self.model.module.state_dict(),
                "OPTIMIZER_STATE": self.optimizer.state_dict(),
                "SCHEDULER_STATE": self.scheduler.state_dict(),
                "EPOCHS_RUN": epoch + 1,
            }
            torch.save(snapshot, self.args.snapshot)
            print(f"Epoch {epoch} | Training snapshot saved at {self.args.snapshot}")

    def train(self, max_epochs: int) -> None:
        for epoch in range(self.epochs_run, max_epochs):
            with Join([self.model, self.optimizer]):
                self._run_epoch(epoch)
            self._save_snapshot(epoch)
        torch.save(self.losses, f"{self.args.losses}.rank{self.global_rank}.pt")


def main(args) -> None:
    ddp_setup(args.device)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(20, 32), torch.nn.GELU(), torch.nn.LayerNorm(32), torch.nn.Linear(32, 1)
    )
    dataset = MyTrainDataset(96)
    loader = DataLoader(
        dataset, batch_size=args.batch_size, shuffle=False, sampler=DistributedSampler(dataset)
    )
    Trainer(model, loader, args).train(args.epochs)
    destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="simple distributed training job")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--accumulate", type=int, default=2)
    parser.add_argument("--snapshot", default="snapshot.pt")
    parser.add_argument("--losses", default="losses")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    main(parser.parse_args())
