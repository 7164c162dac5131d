"""One rank of a 2-rank minidp FSDP run that trains, destroys its process group and exits:
the repeated-exit test starts it again and again and reads how each rank ended.

    MASTER_ADDR=127.0.0.1 MASTER_PORT=29511 WORLD_SIZE=2 RANK=0 python tests/scripts/fsdp_exit.py &
    MASTER_ADDR=127.0.0.1 MASTER_PORT=29511 WORLD_SIZE=2 RANK=1 python tests/scripts/fsdp_exit.py

(``tests/test_fsdp_lifecycle.py``.) A rank that exits with SIGABRT ("terminate called without
an active exception": a C++ thread still running at exit) fails that test.
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared model
from test_fsdp_support import TinyLM, batches, loss_fn, wrap  # noqa: E402

import minidp  # noqa: E402


def main() -> None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=30))
    torch.manual_seed(0)
    model = wrap(TinyLM(), minidp.fully_shard, True, None)
    opt = torch.optim.AdamW(model.parameters())
    for tokens, target in batches(rank, 2):
        opt.zero_grad()
        loss_fn(model, tokens, target).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    dist.destroy_process_group()
    print(f"rank {rank} done", flush=True)


if __name__ == "__main__":
    main()
