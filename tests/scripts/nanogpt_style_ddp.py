"""A training script written the way nanoGPT's ``train.py`` is: module-level config, DDP
detected from the environment ``torchrun`` sets, a tiny GPT on random tokens.

    torchrun --standalone --nproc-per-node 2 tests/scripts/nanogpt_style_ddp.py \
        --out_dir=run --max_iters=6 --init_from=scratch

What it does at once: ``require_backward_grad_sync`` gradient accumulation, per-rank seed
offsets, AdamW with weight-decay groups, a warmup + cosine learning rate set by hand,
``GradScaler`` (disabled unless fp16) with ``unscale_`` before ``clip_grad_norm_``, an
evaluation under ``model.eval()`` and ``torch.no_grad()`` every few iterations (a
forward through DDP that must not arm a reduction), a checkpoint of ``model.module``
(``raw_model``) and the optimizer, and ``--init_from=resume``. ``--device=cuda`` uses
``device_ids=[ddp_local_rank]``, as nanoGPT does.

``tests/test_real_scripts.py`` runs it as written (torch's DDP) and with the one import
line marked below replaced by ``from minidp import DistributedDataParallel as DDP``, and
asserts the same losses and checkpoints, bit for bit. Each rank writes its losses to
``<out_dir>/losses.<init_from>.rank<r>.pt``.
"""

from __future__ import annotations

import math
import os
import sys
from contextlib import nullcontext

import torch
import torch.nn as nn
from torch.distributed import destroy_process_group, init_process_group
from torch.nn import functional as F

# isort: split
from torch.nn.parallel import DistributedDataParallel as DDP  # the line a user swaps

# -----------------------------------------------------------------------------
out_dir = "out"
eval_interval = 3
eval_iters = 2
init_from = "scratch"  # 'scratch' or 'resume'
gradient_accumulation_steps = 4  # used to simulate larger batch sizes
batch_size = 4
block_size = 16
vocab_size = 64
n_layer, n_head, n_embd = 2, 2, 32
learning_rate = 6e-3
max_iters = 6
weight_decay = 1e-1
beta1, beta2 = 0.9, 0.95
grad_clip = 1.0
warmup_iters, lr_decay_iters, min_lr = 2, 10, 6e-4
backend = "gloo"
device = "cpu"
dtype = "float32"
for arg in sys.argv[1:]:  # nanoGPT's configurator, in one loop: --key=value
    key, value = arg.removeprefix("--").split("=")
    globals()[key] = type(globals()[key])(value) if not isinstance(globals()[key], str) else value
# -----------------------------------------------------------------------------


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd)
        )

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(self.ln_1(x)).split(n_embd, dim=2)
        q, k, v = (t.view(B, T, n_head, C // n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList(Block() for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight  # weight tying

    def forward(self, idx, targets):
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    def configure_optimizers(self):
        params = [p for p in self.parameters() if p.requires_grad]
        groups = [
            {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
        ]
        return torch.optim.AdamW(groups, lr=learning_rate, betas=(beta1, beta2))


ddp = int(os.environ.get("RANK", -1)) != -1  # is this a ddp run?
if ddp:
    init_process_group(backend=backend)
    ddp_rank = int(os.environ["RANK"])
    ddp_local_rank = int(os.environ["LOCAL_RANK"])
    ddp_world_size = int(os.environ["WORLD_SIZE"])
    if device == "cuda":
        device = f"cuda:{ddp_local_rank % torch.cuda.device_count()}"
        torch.cuda.set_device(device)
    master_process = ddp_rank == 0
    seed_offset = ddp_rank  # each process gets a different seed
    assert gradient_accumulation_steps % ddp_world_size == 0
    gradient_accumulation_steps //= ddp_world_size
else:
    master_process, seed_offset, ddp_world_size, ddp_rank = True, 0, 1, 0
os.makedirs(out_dir, exist_ok=True)
torch.manual_seed(1337 + seed_offset)
device_type = "cuda" if "cuda" in device else "cpu"
ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
ctx = nullcontext() if device_type == "cpu" else torch.amp.autocast(device_type, dtype=ptdtype)


def get_batch(it: int):
    g = torch.Generator().manual_seed(1000 * it + seed_offset)
    data = torch.randint(vocab_size, (batch_size, block_size + 1), generator=g)
    return data[:, :-1].contiguous().to(device), data[:, 1:].contiguous().to(device)


iter_num, best_val_loss = 0, 1e9
torch.manual_seed(1337)  # the same initial weights on every rank (DDP broadcasts anyway)
model = GPT()
if init_from == "resume":
    checkpoint = torch.load(os.path.join(out_dir, "ckpt.pt"), map_location=device)
    model.load_state_dict(checkpoint["model"])
    iter_num, best_val_loss = checkpoint["iter_num"], checkpoint["best_val_loss"]
model.to(device)
scaler = torch.amp.GradScaler(device_type, enabled=(dtype == "float16"))
optimizer = model.configure_optimizers()
if init_from == "resume":
    optimizer.load_state_dict(checkpoint["optimizer"])
    checkpoint = None  # free up memory
if ddp:
    model = DDP(model, device_ids=[ddp_local_rank] if device_type == "cuda" else None)


@torch.no_grad()
def estimate_loss():
    model.eval()
    losses = torch.zeros(eval_iters)
    for k in range(eval_iters):
        X, Y = get_batch(10_000 + k)
        with ctx:
            _, loss = model(X, Y)
        losses[k] = loss.item()
    model.train()
    return losses.mean()


def get_lr(it: int) -> float:
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
    return min_lr + coeff * (learning_rate - min_lr)


raw_model = model.module if ddp else model
log = []
X, Y = get_batch(iter_num * 100)
while iter_num < max_iters:
    for param_group in optimizer.param_groups:
        param_group["lr"] = get_lr(iter_num)
    if iter_num % eval_interval == 0 and iter_num > 0:
        val = estimate_loss()
        log.append(val)
        if val < best_val_loss and master_process:
            best_val_loss = float(val)
    for micro_step in range(gradient_accumulation_steps):
        if ddp:  # sync only on the last micro step (nanoGPT sets the flag, not no_sync)
            model.require_backward_grad_sync = micro_step == gradient_accumulation_steps - 1
        with ctx:
            logits, loss = model(X, Y)
            loss = loss / gradient_accumulation_steps
        X, Y = get_batch(iter_num * 100 + micro_step + 1)
        scaler.scale(loss).backward()
        log.append(loss.detach().cpu())
    if grad_clip != 0.0:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    iter_num += 1
checkpoint = {
    "model": raw_model.state_dict(),
    "optimizer": optimizer.state_dict(),
    "iter_num": iter_num,
    "best_val_loss": best_val_loss,
}
if master_process:
    torch.save(checkpoint, os.path.join(out_dir, "ckpt.pt"))
torch.save(log, os.path.join(out_dir, f"losses.{init_from}.rank{ddp_rank}.pt"))
if ddp:
    destroy_process_group()
