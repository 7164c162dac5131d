"""The model, data and rank-side helpers of the FSDP tests (no tests in here).

The side-by-side scenarios against FSDP2 are in ``fsdp_scenarios.py``. Functions here run
in the rank processes of ``process_world`` or ``run_threads`` (module-level).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

import minidp
from minidp.fsdp import full_state_dict, load_full_state_dict

VOCAB, DIM, BLOCKS = 13, 10, 2  # 13 rows, 10 and 30 features: padding on 2, 3 and 4 ranks


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 3 * dim)
        self.fc2 = nn.Linear(3 * dim, dim)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


class TinyLM(nn.Module):
    """Embedding, pre-norm MLP blocks, final norm, output head tied to the embedding."""

    def __init__(self, vocab: int = VOCAB, dim: int = DIM, blocks: int = BLOCKS) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim) for _ in range(blocks))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, tokens):
        x = self.emb(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def seeded_lm() -> TinyLM:
    """A TinyLM whose weights come from a private generator: equal on every rank, in threads too."""
    model, g = TinyLM(), torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return model


def batches(rank: int, steps: int):
    g = torch.Generator().manual_seed(100 + rank)  # every rank its own data
    return [
        (torch.randint(0, VOCAB, (4, 5), generator=g), torch.randint(0, VOCAB, (4, 5), generator=g))
        for _ in range(steps)
    ]


def make_optimizer(kind: str, params):
    if kind == "adamw":
        return torch.optim.AdamW(params, lr=1e-2, weight_decay=0.1)
    return torch.optim.SGD(params, lr=0.1, momentum=0.9)


def loss_fn(model, tokens, target):
    return F.cross_entropy(model(tokens).float().flatten(0, 1), target.flatten())


def wrap(model, shard_fn, reshard, policy, root_policy=None, wrap_root=True, **kw):
    for block in model.blocks:
        shard_fn(block, reshard_after_forward=reshard, mp_policy=policy, **kw)
    if wrap_root:
        shard_fn(model, mp_policy=policy if root_policy is None else root_policy, **kw)
    return model


def diff(a: torch.Tensor | None, b: torch.Tensor | None) -> float:
    """0.0 when equal bit for bit (``torch.equal``), else the largest |a - b| (inf: other
    shape, dtype, or a gradient one side has and the other not)."""
    if a is None or b is None:
        return 0.0 if a is b else float("inf")
    if a.shape != b.shape or a.dtype != b.dtype:
        return float("inf")
    if torch.equal(a, b):
        return 0.0
    return (a.double() - b.double()).abs().max().item() or 1e-300  # signed zeros, NaNs


def round_trip(rank: int, world: int) -> dict[str, bool]:
    """Sharded state_dict into a fresh model; full state dict into a fresh model."""
    torch.manual_seed(0)
    model = wrap(TinyLM(), minidp.fully_shard, True, None)
    opt = make_optimizer("adamw", model.parameters())
    for tokens, target in batches(rank, 2):
        opt.zero_grad()
        loss_fn(model, tokens, target).backward()
        opt.step()
    torch.manual_seed(1)  # other initial weights: the loads must overwrite every shard
    sharded = wrap(TinyLM(), minidp.fully_shard, True, None)
    sharded.load_state_dict(model.state_dict())
    torch.manual_seed(2)
    from_full = wrap(TinyLM(), minidp.fully_shard, True, None)
    load_full_state_dict(from_full, full_state_dict(model))
    want = full_state_dict(model)
    torch.manual_seed(3)  # only the blocks are units: the root's parameters are loaded whole
    blocks_only = wrap(TinyLM(), minidp.fully_shard, True, None, wrap_root=False)
    load_full_state_dict(blocks_only, want)
    tokens = batches(rank, 1)[0][0]
    with torch.no_grad():
        out = model(tokens)
        loaded = (sharded, from_full, blocks_only)
        return {
            "sharded_state_dict": _same(full_state_dict(sharded), want),
            "full_state_dict": _same(full_state_dict(from_full), want),
            "blocks_only": _same(full_state_dict(blocks_only), want),
            "same_output": all(torch.equal(m(tokens), out) for m in loaded),
            "keys": list(want) == [n for n, _ in model.named_parameters()],
        }


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def textbook_vs_fully_shard(rank: int, world: int, steps: int = 3) -> list[tuple]:
    """TextbookFSDP and fully_shard trained side by side: (step, param, max |diff|) rows."""
    from minidp.textbook.fsdp import FSDP as TextbookFSDP

    plain, ours = seeded_lm(), seeded_lm()  # thread ranks share the global RNG
    names = [n for n, _ in plain.named_parameters()]
    book = TextbookFSDP(plain)
    wrap(ours, minidp.fully_shard, True, None)
    opt_b, opt_m = (
        make_optimizer("adamw", book.parameters()),
        make_optimizer("adamw", ours.parameters()),
    )
    rows = []
    for step, (tokens, target) in enumerate(batches(rank, steps)):
        for model, opt in ((book, opt_b), (ours, opt_m)):
            opt.zero_grad()
            loss_fn(model, tokens, target).backward()
            if model is book:
                book.reduce_grads()
            opt.step()
        full = full_state_dict(ours)
        with torch.no_grad():
            book(batches(rank, 1)[0][0])  # gathers the textbook's parameters into the module
        for name, p in zip(names, book.params):
            rows.append((step, name, diff(p.detach().clone(), full[name])))
    return rows
