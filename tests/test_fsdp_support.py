"""Model and rank-side scenario code for the FSDP tests (no tests in here).

Each scenario builds the same seeded transformer-like model three times in ONE rank
process and trains it through FSDP2 (``torch.distributed.fsdp.fully_shard`` on a CPU device
mesh, gloo) and through ``minidp.fully_shard`` with the same wrapping, policy, optimizer and
per-rank data. After every step it records, per parameter, the largest difference of the
full parameter, of this rank's shard (vs FSDP2's ``to_local()``) and of the shard's
gradient. Functions here run in the rank processes of ``process_world`` (module-level).
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


SCENARIOS = {
    # name: (optimizer, param_dtype, reshard_after_forward for the blocks, steps)
    "adamw": ("adamw", None, True, 3),
    "sgd_keep_gathered": ("sgd", None, False, 3),
    # reduce_dtype unset: the installed torch's rule (bf16 sums up to 2.14, fp32 from 2.15)
    "bf16": ("adamw", torch.bfloat16, True, 3),
    "bf16_reduce_bf16": ("adamw", (torch.bfloat16, torch.bfloat16), True, 3),
    "bf16_reduce_fp32": ("adamw", (torch.bfloat16, torch.float32), True, 3),
    "fp16": ("adamw", torch.float16, True, 3),
    # fp16 sums divide before and after the reduce-scatter (2 and 2 at 4 ranks) on every torch
    "fp16_reduce_fp16": ("adamw", (torch.float16, torch.float16), True, 3),
    # frozen parameters: each block's LayerNorm frozen before wrapping (a unit mixing frozen
    # and trainable parameters), and one Linear frozen after step 0, unfrozen after step 1
    "frozen_norms": ("adamw", None, True, 3),
    "freeze_after_wrap": ("adamw", None, True, 3),
    # two backward() calls before each step: the shards' .grad accumulates both
    "accumulate": ("adamw", None, True, 3),
    "bf16_accumulate": ("adamw", torch.bfloat16, True, 3),
    # torch.nn.utils.clip_grad_norm_ on the shards: the global norm on every rank; the
    # second also accumulates two micro-batches and clips by the max-norm (inf)
    "clip": ("adamw", None, True, 3),
    "clip_inf_accumulate": ("adamw", None, True, 3),
    # only the blocks wrapped: the root's parameters belong to no unit (whole on each rank,
    # not reduced, in FSDP2 too); the full state dict holds them as they are
    "root_unwrapped": ("adamw", None, True, 2),
    # bf16 blocks under an fp32 root: each block casts its fp32 input to bf16 itself and
    # hands the root fp32 again (output_dtype)
    "bf16_blocks_only": ("adamw", torch.bfloat16, True, 3),
}


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


def minidp_shards(model) -> dict[str, tuple[torch.Tensor, torch.Tensor | None]]:
    """{name: (this rank's shard, its grad)} — named like model.named_parameters()."""
    return {n: (p.detach().clone(), p.grad) for n, p in model.named_parameters()}


def run_scenario(rank: int, world: int, name: str) -> list[tuple]:
    """Train FSDP2 and minidp side by side; return (step, tensor, what, max |diff|) rows."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    opt_kind, dtypes, reshard, steps = SCENARIOS[name]
    param_dtype, reduce_dtype = dtypes if isinstance(dtypes, tuple) else (dtypes, None)
    torch.manual_seed(0)
    theirs, ours = TinyLM(), TinyLM()
    ours.load_state_dict(theirs.state_dict())
    if name == "frozen_norms":
        for model in (theirs, ours):
            for block in model.blocks:
                block.norm.requires_grad_(False)
    mesh = init_device_mesh("cpu", (world,))
    policy = {"param_dtype": param_dtype, "reduce_dtype": reduce_dtype}
    root_policy = policy
    if name == "bf16_blocks_only":
        policy, root_policy = {**policy, "output_dtype": torch.float32}, {}
    root = name != "root_unwrapped"
    wrap(theirs, fully_shard, reshard, MixedPrecisionPolicy(**policy), mesh=mesh,
         root_policy=MixedPrecisionPolicy(**root_policy), wrap_root=root)  # fmt: skip
    wrap(ours, minidp.fully_shard, reshard, minidp.MixedPrecisionPolicy(**policy),
         root_policy=minidp.MixedPrecisionPolicy(**root_policy), wrap_root=root)  # fmt: skip
    micro = 2 if name.endswith("accumulate") else 1
    clip = {"clip": 2.0, "clip_inf_accumulate": float("inf")}.get(name)
    norms: dict[bool, torch.Tensor] = {}  # is FSDP2's -> this step's total norm
    opt_t = make_optimizer(opt_kind, theirs.parameters())
    opt_m = make_optimizer(opt_kind, ours.parameters())
    rows = []
    for step, (tokens, target) in enumerate(batches(rank, steps)):
        if name == "freeze_after_wrap" and step in (1, 2):
            for model in (theirs, ours):
                model.blocks[0].fc1.requires_grad_(step == 2)  # frozen for step 1 only
        for model, opt in ((theirs, opt_t), (ours, opt_m)):
            opt.zero_grad()
            for i in range(micro):  # micro-batches: halves of the rows (one: all of them)
                part = slice(i * len(tokens) // micro, (i + 1) * len(tokens) // micro)
                loss_fn(model, tokens[part], target[part]).backward()
            if clip is not None:  # max_norm below the norms seen: every step clips
                norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5, norm_type=clip)
                norms[model is theirs] = norm.full_tensor() if model is theirs else norm
            opt.step()
        if clip is not None:
            rows.append((step, "total norm", "clip", _diff(norms[False], norms[True])))
        full = full_state_dict(ours)
        shards = minidp_shards(ours)
        for n, p in theirs.named_parameters():
            whole = p.full_tensor() if hasattr(p, "full_tensor") else p.detach()  # no unit's
            rows.append((step, n, "full", _diff(full[n], whole)))
            mine, grad = shards[n]
            rows.append((step, n, "shard", _diff(mine, _local(p.detach()))))
            rows.append((step, n, "grad", _diff(_local(grad), _local(p.grad))))
    return rows


def _local(t: torch.Tensor | None) -> torch.Tensor | None:
    """This rank's plain tensor: a DTensor's or ShardedGrad's local part; None stays None."""
    return t.to_local() if hasattr(t, "to_local") else t


def _diff(a: torch.Tensor | None, b: torch.Tensor | None) -> float:
    if a is None or b is None:  # a gradient one side has and the other not
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
    from minidp.fsdp.textbook import TextbookFSDP

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
            rows.append((step, name, _diff(p.detach().clone(), full[name])))
    return rows
