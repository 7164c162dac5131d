"""Models and rank-side runners shared by the ZeRO and memory tests (no tests here).

Functions sent to rank processes must be module-level, so they live here, importable
by the rank processes of ``minidp.launch.ProcessWorld``.
"""

from __future__ import annotations

import copy

import torch
import torch.distributed as dist
import torch.nn as nn

VOCAB, DIM = 11, 8


class TinyLM(nn.Module):
    """Transformer-like: embedding, norm, MLP, a frozen projection, output tied to the embedding."""

    def __init__(self, frozen: bool = True) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, DIM)
        self.norm = nn.LayerNorm(DIM)
        self.fc1 = nn.Linear(DIM, 3 * DIM)
        self.fc2 = nn.Linear(3 * DIM, DIM)
        self.proj = nn.Linear(DIM, DIM, bias=False)
        self.proj.requires_grad_(not frozen)
        self.head = nn.Linear(DIM, VOCAB, bias=False)
        self.head.weight = self.emb.weight  # tied: one parameter, two uses

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.emb(tokens))
        h = h + self.fc2(torch.tanh(self.fc1(h)))
        return self.head(self.proj(h))


def batch(rank: int, step: int, n: int = 6, seq: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * step + rank)  # every rank its own data
    x = torch.randint(0, VOCAB, (n, seq), generator=g)
    return x, torch.randint(0, VOCAB, (n, seq), generator=g)


def lm_loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten())


def loss_of(model, x, y) -> torch.Tensor:
    return lm_loss(model(x), y)


OPTIMIZERS = {
    "adamw": (torch.optim.AdamW, {"lr": 1e-2, "weight_decay": 0.1}),
    "sgd_momentum": (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}),
}


def diffs(a, b) -> list:
    """(name, max |diff|) for each parameter that is not ``torch.equal``."""
    out = []
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        if not torch.equal(p, q):
            out.append((name, float((p - q).detach().abs().max())))
    return out


def state_diffs(sa: dict, sb: dict) -> list:
    """Where two optimizer state dicts differ (indices, keys, tensors, options)."""
    out = []
    if sorted(sa["state"]) != sorted(sb["state"]):
        return [("indices", sorted(sa["state"]), sorted(sb["state"]))]
    for i in sa["state"]:
        for k in set(sa["state"][i]) | set(sb["state"][i]):
            x, y = sa["state"][i].get(k), sb["state"][i].get(k)
            same = torch.equal(x, y) if torch.is_tensor(x) and torch.is_tensor(y) else x == y
            if not same:
                out.append((i, k))
    ga = [{k: v for k, v in g.items()} for g in sa["param_groups"]]
    gb = [{k: v for k, v in g.items()} for g in sb["param_groups"]]
    if ga != gb:
        out.append(("param_groups", ga, gb))
    return out


def train_side_by_side(rank: int, ours: tuple, ref: tuple, steps) -> list[list]:
    """Train (model, optimizer) pairs on the same batches; the differences after each step."""
    out = []
    for step in steps:
        x, y = batch(rank, step)
        for model, opt in (ours, ref):
            opt.zero_grad()
            loss_of(model, x, y).backward()
            opt.step()
        out.append(diffs(ours[0], ref[0]))
    return out


def zero1_parity(rank: int, world: int, optimizers: list[str], steps: int = 4) -> dict:
    """minidp DDP + minidp ZeRO-1 vs torch DDP + torch ZeRO, same process, same data."""
    from torch.distributed.optim import ZeroRedundancyOptimizer as TorchZero

    import minidp

    out = {}
    for name in optimizers:
        cls, kw = OPTIMIZERS[name]
        torch.manual_seed(rank)  # ranks start different: DDP's broadcast must fix that
        base = TinyLM()
        ours = minidp.DistributedDataParallel(copy.deepcopy(base))
        ref = nn.parallel.DistributedDataParallel(copy.deepcopy(base))
        opt = minidp.ZeroRedundancyOptimizer(ours.parameters(), cls, **kw)
        topt = TorchZero(ref.parameters(), cls, **kw)
        index = {p: i for i, p in enumerate(ours.parameters())}
        tindex = {p: i for i, p in enumerate(ref.parameters())}
        owned = [index[p] for p in opt.owned_parameters()]
        towned = [tindex[p] for g in topt.optim.param_groups for p in g["params"]]
        per_step = train_side_by_side(rank, (ours, opt), (ref, topt), range(steps))
        opt.consolidate_state_dict(to=0)
        topt.consolidate_state_dict(to=0)
        sd = state = None
        if rank == 0:
            sd, tsd = opt.state_dict(), topt.state_dict()
            state = state_diffs(sd, tsd)
        # resume: a fresh minidp ZeRO loads torch's consolidated state and keeps step-for-step
        box = [topt.state_dict() if rank == 0 else None]
        dist.broadcast_object_list(box, src=0)
        resumed = minidp.ZeroRedundancyOptimizer(ours.parameters(), cls, **kw)
        resumed.load_state_dict(box[0])
        after = train_side_by_side(rank, (ours, resumed), (ref, topt), range(steps, steps + 2))
        out[name] = {
            "per_step": per_step,
            "owned": owned,
            "torch_owned": towned,
            "state": state,
            "resumed": after,
            "n_state": None if sd is None else len(sd["state"]),
        }
    return out


def max_diff(a, b) -> float:
    """Largest |difference| over all parameters (0.0: every parameter ``torch.equal``)."""
    worst = 0.0
    for p, q in zip(a.parameters(), b.parameters()):
        if not torch.equal(p, q):
            worst = max(worst, float((p - q).detach().abs().max()), 1e-45)
    return worst


def zero2_parity(rank: int, world: int, optimizers: list[str], steps: int = 4) -> dict:
    """minidp ZeRO-2 (bucketed, small buckets) and both textbook versions vs torch ZeRO + DDP.

    Returns per optimizer and variant the max |diff| after every step (0.0 = torch.equal).
    """
    from torch.distributed.optim import ZeroRedundancyOptimizer as TorchZero

    from minidp.textbook.zero import TextbookZero1, TextbookZero2
    from minidp.zero import Zero2Optimizer

    out = {}
    for name in optimizers:
        cls, kw = OPTIMIZERS[name]
        torch.manual_seed(rank)  # ranks start different: rank 0's weights must win
        base = TinyLM()
        ref = nn.parallel.DistributedDataParallel(copy.deepcopy(base))
        topt = TorchZero(ref.parameters(), cls, **kw)
        ours = copy.deepcopy(base)
        variants = {
            "zero2": (ours, Zero2Optimizer(ours.parameters(), cls, bucket_cap_mb=0.0005, **kw))
        }
        for key, textbook in (("textbook1", TextbookZero1), ("textbook2", TextbookZero2)):
            model = copy.deepcopy(ref.module)  # already rank 0's weights
            variants[key] = (model, textbook(model.parameters(), cls, **kw))
        result = {key: [] for key in variants}
        result["buckets"] = len(variants["zero2"][1].buckets)
        for step in range(steps):
            x, y = batch(rank, step)
            topt.zero_grad()
            loss_of(ref, x, y).backward()
            topt.step()
            for key, (model, opt) in variants.items():
                opt.zero_grad()
                loss_of(model, x, y).backward()
                opt.step()
                result[key].append(max_diff(model, ref.module))
        out[name] = result
    return out


def memory_by_stage(rank: int, world: int, base: nn.Module, stages: list[str]) -> dict:
    """Each stage's measured model states and bytes sent per step, on this rank."""
    from minidp.tools.planner.stages import step_and_measure, step_traffic

    x, y = batch(rank, 0)
    out = {}
    for stage in stages:
        usage = step_and_measure(stage, base, x, y, lm_loss, torch.optim.AdamW, lr=1e-2)
        sent = step_traffic(stage, base, x, y, lm_loss, torch.optim.AdamW, lr=1e-2)
        out[stage] = (usage.params, usage.grads, usage.optimizer, sent)
    return out


class Wide(nn.Module):
    """An MLP big enough (~25k parameters) that message headers are noise in traffic counts."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 64)
        self.fc1 = nn.Linear(64, 150)
        self.fc2 = nn.Linear(150, 64)
        self.head = nn.Linear(64, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.fc2(torch.relu(self.fc1(self.emb(tokens)))))


def zero2_vs_fsdp2(rank: int, world: int, steps: int = 3) -> dict:
    """minidp ZeRO-2 vs FSDP2 ``fully_shard(reshard_after_forward=False)`` (torch's ZeRO-2-like
    mode) on the root: full parameters and each rank's dim-0 shard after every step."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from minidp.zero import Zero2Optimizer

    cls, kw = OPTIMIZERS["adamw"]
    torch.manual_seed(0)  # FSDP2 does not broadcast: every rank starts from the same weights
    base = TinyLM()
    ref = fully_shard(copy.deepcopy(base), mesh=init_device_mesh("cpu", (world,)),
                      reshard_after_forward=False)  # fmt: skip
    topt = cls(ref.parameters(), **kw)
    ours = copy.deepcopy(base)
    opt = Zero2Optimizer(ours.parameters(), cls, **kw)
    shards = {id(piece.param): piece.shard for b in opt.buckets for piece in b.pieces}
    full, local = [], []
    for step in range(steps):
        x, y = batch(rank, step)
        for model, o in ((ref, topt), (ours, opt)):
            o.zero_grad()
            loss_of(model, x, y).backward()
            o.step()
        ref_full = [p.full_tensor() for p in ref.parameters()]
        full.append(max_diff(nn.ParameterList(ref_full), nn.ParameterList(ours.parameters())))
        trainable = [(p, q) for p, q in zip(ref.parameters(), ours.parameters()) if q.requires_grad]
        local.append(
            all(torch.equal(p.to_local().flatten(), shards[id(q)].flatten()) for p, q in trainable)
        )
    return {"full": full, "local": local}
