"""Rank-side runners for the DDP / ZeRO rows of the training-loop matrix (no tests here).

``run_cases`` trains minidp's wrapper and torch's equivalent side by side, in the same rank
process, on the same seeded model and the same per-rank data, with a set of ordinary
training-loop moves (``MOVES``), and reports after every step which parameters are not
``torch.equal``. The wrappers (``WRAPPERS``) and their torch references:

* ``ddp``: ``minidp.DistributedDataParallel`` + AdamW vs torch DDP + AdamW;
* ``zero1``: minidp DDP + ``minidp.ZeroRedundancyOptimizer`` vs torch DDP + torch's
  ``ZeroRedundancyOptimizer``;
* ``zero2``: ``minidp.zero.Zero2Optimizer`` (no DDP) vs torch DDP + torch's
  ``ZeroRedundancyOptimizer``. With accumulation the reference averages each micro-batch
  through DDP and adds the averages (what ZeRO-2 and FSDP2 compute; plain DDP averages
  ``avg1 + local2`` again, which rounds differently — ``test_zero2_train.py``). With
  ``no_sync``, ``clip`` or ``frozen_after`` the reference is FSDP2 ``fully_shard(
  reshard_after_forward=False)``, torch's ZeRO-2-like mode (``FSDP2_MOVES`` says why).

Functions sent to rank processes must be module-level, so they live here.
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.checkpoint import checkpoint

import minidp
from minidp.zero import Zero2Optimizer

VOCAB, DIM = 11, 8
ADAMW = {"lr": 1e-2, "weight_decay": 0.1}
MAX_NORM = 0.05  # below every step's gradient norm here: clipping really scales
CAP = 0.0005  # MiB: several ZeRO-2 buckets for this model
WRAPPERS = ("ddp", "zero1", "zero2")
# ZeRO-2 moves whose torch equivalent is FSDP2 with reshard_after_forward=False: its sharded
# gradients give clip_grad_norm_ the norm of every rank's rows (DDP's full gradients round
# the norm differently), set_requires_gradient_sync is its no_sync, and it follows a
# parameter frozen after wrapping (DDP needs find_unused_parameters, ZeRO's owner broadcast)
FSDP2_MOVES = {"no_sync", "clip", "frozen_after"}
MOVES = (
    "accumulation",  # two backwards, then step
    "no_sync",  # the first micro-batch inside no_sync() / set_requires_gradient_sync(False)
    "clip",  # clip_grad_norm_ after backward, before step
    "scheduler",  # StepLR, stepped after every optimizer step
    "state_dict",  # after step 0: model + optimizer (+ scheduler) state -> fresh objects
    "tied",  # the output head shares the embedding's weight
    "frozen_before",  # proj.requires_grad_(False) before wrapping
    "frozen_after",  # proj.requires_grad_(False) after step 0 (DDP: find_unused_parameters)
    "param_groups",  # the norm in a second group: other lr, no weight decay
    "checkpoint",  # the MLP block under torch.utils.checkpoint(use_reentrant=False)
    "eval",  # model.eval() + a no_grad forward between steps, then model.train()
    "meta",  # built on meta, to_empty, weights loaded, then wrapped
    "float64",  # model.double() before wrapping
    "dataclass_out",  # the model returns a dataclass holding a dict and a str
)
# not a move: with it, ZeRO-2 is compared with torch DDP + ZeRO even where FSDP2_MOVES
# would pick FSDP2 (a parameter frozen after wrapping, with no_grad forwards between steps)
DDP_REFERENCE = "ddp_reference"


@dataclass
class Output:
    logits: torch.Tensor
    extra: dict
    tag: str


class Net(nn.Module):
    """Embedding, norm, an MLP block, a projection and an output head."""

    def __init__(self, tied=False, checkpointed=False, dataclass_out=False) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, DIM)
        self.norm = nn.LayerNorm(DIM)
        self.fc1 = nn.Linear(DIM, 3 * DIM)
        self.fc2 = nn.Linear(3 * DIM, DIM)
        self.proj = nn.Linear(DIM, DIM, bias=False)
        self.head = nn.Linear(DIM, VOCAB, bias=False)
        if tied:
            self.head.weight = self.emb.weight
        self.checkpointed, self.dataclass_out = checkpointed, dataclass_out

    def block(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.fc2(torch.tanh(self.fc1(h)))

    def forward(self, tokens: torch.Tensor):
        h = self.norm(self.emb(tokens))
        h = checkpoint(self.block, h, use_reentrant=False) if self.checkpointed else self.block(h)
        logits = self.head(self.proj(h))
        if self.dataclass_out:
            return Output(logits, {"hidden": h, "step_note": 1}, "lm")
        return logits


def logits_of(out) -> torch.Tensor:
    return out.logits if isinstance(out, Output) else out


def loss_of(model, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = model(x)
    loss = F.cross_entropy(logits_of(out).flatten(0, 1), y.flatten())
    if isinstance(out, Output):  # a second tensor in the structure takes part in the loss
        loss = loss + 0.01 * out.extra["hidden"].pow(2).mean()
    return loss


def batch(rank: int, i: int, n: int = 6, seq: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * i + rank)  # every rank its own data
    x = torch.randint(0, VOCAB, (n, seq), generator=g)
    return x, torch.randint(0, VOCAB, (n, seq), generator=g)


def make_net(moves: set, seed: int) -> nn.Module:
    """The seeded model with the moves that shape it (ranks pass different seeds)."""
    kw = {
        "tied": "tied" in moves,
        "checkpointed": "checkpoint" in moves,
        "dataclass_out": "dataclass_out" in moves,
    }
    torch.manual_seed(seed)
    base = Net(**kw)
    if "meta" in moves:  # built on meta, materialized, the weights loaded: then wrapped
        with torch.device("meta"):
            net = Net(**kw)
        net.to_empty(device="cpu")
        net.load_state_dict(base.state_dict())
        base = net
    if "frozen_before" in moves:
        base.proj.requires_grad_(False)
    if "float64" in moves:
        base.double()
    return base


def param_groups(module: nn.Module, moves: set):
    if "param_groups" not in moves:
        return list(module.parameters())
    norm = [p for n, p in module.named_parameters() if n.startswith("norm.")]
    rest = [p for n, p in module.named_parameters() if not n.startswith("norm.")]
    return [{"params": rest}, {"params": norm, "lr": 3e-3, "weight_decay": 0.0}]


def make_scheduler(opt):
    return torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)


class Side:
    """One training setup: what is called (``model``), the plain module, the optimizer."""

    def __init__(self, wrapper: str, impl: str, net: nn.Module, moves: set) -> None:
        self.impl, self.moves = impl, moves
        self.fsdp2 = (
            wrapper == "zero2" and impl == "torch" and bool(moves & FSDP2_MOVES)
        ) and DDP_REFERENCE not in moves
        # add per-micro-batch averages (DDP would average avg1 + local2 again)
        self.summed = wrapper == "zero2" and impl == "torch" and not self.fsdp2
        ddp_kw = {"find_unused_parameters": True} if "frozen_after" in moves else {}
        if self.fsdp2:
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.fsdp import fully_shard

            with torch.no_grad():  # FSDP2 does not broadcast: start from rank 0's, like ZeRO-2
                for p in net.parameters():
                    dist.broadcast(p, src=0)
            mesh = init_device_mesh("cpu", (dist.get_world_size(),))
            self.model = fully_shard(net, mesh=mesh, reshard_after_forward=False)
            self.module = net
            self.opt = torch.optim.AdamW(param_groups(net, moves), **ADAMW)
        elif wrapper == "zero2" and impl == "minidp":
            self.model = self.module = net
            self.opt = Zero2Optimizer(
                param_groups(net, moves), torch.optim.AdamW, bucket_cap_mb=CAP, **ADAMW
            )
        else:
            ddp = {"minidp": minidp.DistributedDataParallel, "torch": DDP}[impl]
            self.model = ddp(net, **ddp_kw)
            self.module = net
            groups = param_groups(net, moves)
            if wrapper == "ddp":
                self.opt = torch.optim.AdamW(groups, **ADAMW)
            elif impl == "minidp":
                self.opt = minidp.ZeroRedundancyOptimizer(groups, torch.optim.AdamW, **ADAMW)
            else:  # imported here: it pulls in torch.jit, which warns at import
                from torch.distributed.optim import ZeroRedundancyOptimizer as TorchZero

                self.opt = TorchZero(groups, torch.optim.AdamW, **ADAMW)
        self.sched = make_scheduler(self.opt) if "scheduler" in moves else None

    def step(self, micro: list) -> float | None:
        self.opt.zero_grad()
        params = list(self.module.parameters())
        if self.summed and len(micro) > 1:
            per_micro = []
            for x, y in micro:
                for p in params:
                    p.grad = None
                loss_of(self.model, x, y).backward()
                per_micro.append([p.grad for p in params])
            for p, g1, g2 in zip(params, *per_micro):
                p.grad = None if g1 is None else g1 + g2
        else:
            for i, (x, y) in enumerate(micro):
                first = "no_sync" in self.moves and i < len(micro) - 1
                with self.no_sync() if first else contextlib.nullcontext():
                    loss_of(self.model, x, y).backward()
        norm = None
        if "clip" in self.moves:  # the ordinary call, on the module's parameters
            total = torch.nn.utils.clip_grad_norm_(self.module.parameters(), MAX_NORM)
            norm = float(total.full_tensor() if hasattr(total, "full_tensor") else total)
        self.opt.step()
        if self.sched is not None:
            self.sched.step()
        return norm

    @contextlib.contextmanager
    def no_sync(self):
        """Backwards that keep their gradients local: each wrapper's own way to say it."""
        if self.fsdp2:
            self.model.set_requires_gradient_sync(False)
            yield
            self.model.set_requires_gradient_sync(True)
        elif isinstance(self.opt, Zero2Optimizer):
            with self.opt.no_sync():
                yield
        else:
            with self.model.no_sync():
                yield

    def checkpoint(self) -> dict:
        """Model, optimizer and scheduler state, the same on every rank (ZeRO: consolidated)."""
        if hasattr(self.opt, "consolidate_state_dict"):
            self.opt.consolidate_state_dict(to=0)
            box = [self.opt.state_dict() if dist.get_rank() == 0 else None]
            dist.broadcast_object_list(box, src=0)
            optim = box[0]
        else:
            optim = self.opt.state_dict()
        sched = self.sched.state_dict() if self.sched is not None else None
        return copy.deepcopy({"model": self.module.state_dict(), "optim": optim, "sched": sched})

    def load(self, ckpt: dict) -> None:
        self.opt.load_state_dict(copy.deepcopy(ckpt["optim"]))
        if self.sched is not None:
            self.sched.load_state_dict(ckpt["sched"])


def diffs(a: nn.Module, b: nn.Module) -> list:
    """(name, max |diff|) for every parameter that is not ``torch.equal``."""
    out = []
    for (name, p), q in zip(a.named_parameters(), b.parameters(), strict=True):
        q = q.full_tensor() if hasattr(q, "full_tensor") else q  # FSDP2: the whole tensor
        if not torch.equal(p, q):
            out.append((name, float((p - q).detach().abs().max())))
    return out


def fresh(wrapper: str, moves: set, rank: int, ckpt: dict) -> Side:
    """A resumed minidp side: new model (other weights), weights and state loaded, wrapped."""
    net = make_net(moves, seed=99 + rank)
    net.load_state_dict(ckpt["model"])
    side = Side(wrapper, "minidp", net, moves)
    side.load(ckpt)
    return side


def run_case(rank: int, wrapper: str, moves: set, steps: int = 3) -> dict:
    """minidp vs torch with ``moves``: per-step parameter diffs and the evidence the moves ran."""
    base = make_net(moves, seed=rank)  # ranks start different: the wrapper's broadcast fixes it
    ours = Side(wrapper, "minidp", copy.deepcopy(base), moves)
    ref = Side(wrapper, "torch", copy.deepcopy(base), moves)
    two = {"accumulation", "no_sync"} & moves
    out = {"per_step": [], "norms": [], "lrs": [], "eval": [], "frozen_moved": False}
    for step in range(steps):
        if "frozen_after" in moves and step == 1:
            for side in (ours, ref):
                side.module.proj.requires_grad_(False)
            frozen = ours.module.proj.weight.detach().clone()
        micro = [batch(rank, 2 * step + i) for i in range(2 if two else 1)]
        norms = [side.step(micro) for side in (ours, ref)]
        out["norms"].append(norms)
        out["lrs"].append([g["lr"] for g in ours.opt.param_groups])
        if "eval" in moves:
            x_eval = batch(rank, 500 + step)[0]
            outs = []
            for side in (ours, ref):
                side.model.eval()
                with torch.no_grad():
                    outs.append(logits_of(side.model(x_eval)))
                side.model.train()
            out["eval"].append(torch.equal(*outs))
        if "state_dict" in moves and step == 0:  # the "crash": only the checkpoint survives
            ckpt = ours.checkpoint()
            del ours
            ours = fresh(wrapper, moves, rank, ckpt)
        out["per_step"].append(diffs(ours.module, ref.module))
    if "frozen_after" in moves:
        out["frozen_moved"] = not torch.equal(frozen, ours.module.proj.weight)
    out["tied"] = ours.module.head.weight is ours.module.emb.weight
    out["dtype"] = str(ours.module.fc1.weight.dtype)
    return out


def run_cases(rank: int, world: int, cases: list[tuple[str, tuple]]) -> dict:
    """Every (wrapper, moves) case in one call (one process start for the whole file)."""
    result = {}
    for wrapper, moves in cases:
        result[wrapper, moves] = run_case(rank, wrapper, set(moves))
        dist.barrier()
    return result


# ---- W -> W': a checkpoint saved at one world size, resumed at another ----------------------


def reshard_save(rank: int, world: int, wrapper: str, steps: int = 2) -> dict:
    """Train minidp beside torch at this world size; minidp's checkpoint (every rank)."""
    moves = {"scheduler"}
    base = make_net(moves, seed=rank)
    ours = Side(wrapper, "minidp", copy.deepcopy(base), moves)
    ref = Side(wrapper, "torch", copy.deepcopy(base), moves)
    per_step = []
    for step in range(steps):
        for side in (ours, ref):
            side.step([batch(rank, step)])
        per_step.append(diffs(ours.module, ref.module))
    ckpt, theirs = ours.checkpoint(), ref.checkpoint()
    same_state = _same_state(ckpt["optim"], theirs["optim"])
    return {"per_step": per_step, "ckpt": ckpt, "state_equals_torch": same_state}


def _same_state(a: dict, b: dict) -> bool:
    if sorted(a["state"]) != sorted(b["state"]) or a["param_groups"] != b["param_groups"]:
        return False
    return all(
        torch.equal(torch.as_tensor(a["state"][i][k]), torch.as_tensor(b["state"][i][k]))
        for i in a["state"]
        for k in a["state"][i]
    )


def reshard_resume(rank: int, world: int, wrapper: str, ckpt: dict, steps: int = 3) -> dict:
    """Load one checkpoint into fresh minidp and torch setups here; train both on."""
    moves = {"scheduler"}
    sides = []
    for impl in ("minidp", "torch"):
        net = make_net(moves, seed=99 + rank)
        net.load_state_dict(ckpt["model"])
        side = Side(wrapper, impl, net, moves)
        side.load(ckpt)
        sides.append(side)
    ours, ref = sides
    per_step = []
    for step in range(steps):
        for side in sides:
            side.step([batch(rank, 100 + step)])
        per_step.append(diffs(ours.module, ref.module))
    return {"per_step": per_step, "lr": ours.opt.param_groups[0]["lr"]}


# ---- DDP: a parameter frozen after wrapping, without find_unused_parameters -------------------


def frozen_after_without_find_unused(rank: int, world: int, impl: str) -> dict:
    """torch DDP's behaviour: the step after the freeze trains (its bucket is never reduced),
    the next forward raises. Returns the parameters after each step and the error."""
    moves: set = set()
    side = Side("ddp", impl, make_net(moves, seed=rank), moves)
    weights, error = [], None
    for step in range(3):
        if step == 1:
            side.module.proj.requires_grad_(False)
        try:
            side.step([batch(rank, step)])
        except RuntimeError as err:
            error = str(err)
            break
        weights.append(copy.deepcopy(side.module.state_dict()))
    return {"weights": weights, "error": error}
