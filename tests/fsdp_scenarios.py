"""FSDP2 and minidp trained side by side in one rank process, for ``tests/test_fsdp.py``.

Each scenario builds the same seeded transformer-like model twice, wraps it with FSDP2
(``torch.distributed.fsdp.fully_shard`` on a CPU device mesh, gloo) and with
``minidp.fully_shard`` the same way, and trains both with the same policy, optimizer,
per-rank data and training-loop moves (accumulation, clipping, freezing, dtype moves, meta
init...). After every step it records, per parameter, the largest difference of the full
parameter, of this rank's shard (vs FSDP2's ``to_local()``) and of the shard's gradient.
Functions here run in the rank processes of ``process_world`` (module-level).
"""

from __future__ import annotations

import copy
import dataclasses

import torch
import torch.nn as nn
from test_fsdp_support import Block, TinyLM, batches, diff, loss_fn, make_optimizer, wrap

import minidp
from minidp.fsdp import full_state_dict, load_full_state_dict

SCENARIOS = {
    # name: (optimizer, param_dtype or (param_dtype, reduce_dtype), reshard_after_forward, steps)
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
    # the first micro-batch under set_requires_gradient_sync(False): unreduced gradients
    # accumulate (from torch 2.15 in the reduce dtype when wider: bf16 micro-batches in fp32)
    "no_sync_accumulate": ("adamw", None, True, 3),
    "bf16_no_sync_accumulate": ("adamw", torch.bfloat16, True, 3),
    "bf16_fp32_no_sync_accumulate": ("adamw", (torch.bfloat16, torch.float32), True, 3),
    # the same loss backward twice (retain_graph=True): the units are gathered again
    "retain_graph": ("adamw", None, True, 2),
    # torch.nn.utils.clip_grad_norm_ on the shards: the global norm on every rank; the
    # second also accumulates two micro-batches and clips by the max-norm (inf)
    "clip": ("adamw", None, True, 3),
    "clip_inf_accumulate": ("adamw", None, True, 3),
    # ignored_params: the final norm left whole on each rank, never reduced (FSDP2's too)
    "ignored_params": ("adamw", None, True, 2),
    # only the blocks wrapped: the root's parameters belong to no unit (whole on each rank,
    # not reduced, in FSDP2 too); the full state dict holds them as they are
    "root_unwrapped": ("adamw", None, True, 2),
    # bf16 blocks under an fp32 root: each block casts its fp32 input to bf16 itself and
    # hands the root fp32 again (output_dtype)
    "bf16_blocks_only": ("adamw", torch.bfloat16, True, 3),
    # an LR scheduler; two param groups (other lr, no weight decay on norms); activation
    # checkpointing (each block recomputed in backward: gathered again, kept till its grads);
    # an eval forward under no_grad between the steps
    "lr_scheduler": ("adamw", None, True, 3),
    "param_groups": ("adamw", None, True, 3),
    "activation_checkpointing": ("adamw", None, True, 3),
    "bf16_activation_checkpointing": ("adamw", torch.bfloat16, True, 3),
    "eval_between_steps": ("sgd", None, True, 3),
    # model.to(torch.float64) after wrapping; blocks that return a dataclass; built on the
    # meta device, wrapped, to_empty(), then loaded from a full state dict
    "float64_after_wrap": ("adamw", None, True, 2),
    "dataclass_outputs": ("adamw", None, True, 2),
    "meta_init": ("adamw", None, True, 2),
}


# A real loop does several things at once: these scenarios combine moves (bf16 policy).
COMBINED = {
    "bf16_combined": {"frozen_norms", "freeze_after_wrap", "clip", "lr_scheduler",
                      "param_groups", "eval_between_steps", "dataclass_outputs"},
    "bf16_meta_accumulate_clip": {"meta_init", "no_sync_accumulate", "clip"},
    # after step 0 only minidp's sharded model + optimizer + scheduler state survive: a fresh
    # model loads them and trains on beside FSDP2, which never stopped
    "bf16_state_dict_resumed": {"state_dict_resume", "lr_scheduler", "clip",
                                "no_sync_accumulate", "param_groups"},
    "state_dict_resumed": {"state_dict_resume", "lr_scheduler", "clip"},
}  # fmt: skip
SCENARIOS.update(
    bf16_combined=("adamw", torch.bfloat16, True, 3),
    bf16_meta_accumulate_clip=("adamw", torch.bfloat16, True, 3),
    bf16_state_dict_resumed=("adamw", torch.bfloat16, True, 3),
    state_dict_resumed=("adamw", None, True, 3),
)


@dataclasses.dataclass
class BlockOutput:
    hidden: torch.Tensor


class DataclassBlock(Block):
    def forward(self, x):
        return BlockOutput(super().forward(x))


class DataclassLM(TinyLM):
    """TinyLM whose blocks return a dataclass (outputs FSDP must find its hooks' tensors in)."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(DataclassBlock(self.emb.embedding_dim) for _ in self.blocks)

    def forward(self, tokens):
        x = self.emb(tokens)
        for block in self.blocks:
            x = block(x).hidden
        return self.head(self.norm(x))


class CheckpointedLM(TinyLM):
    """TinyLM whose blocks run under activation checkpointing (recomputed in backward).
    ``early_stop=False``: the recomputation runs the whole block, its forward hooks too
    (by default torch stops it once the saved tensors are back, before the block ends)."""

    early_stop = True

    def forward(self, tokens):
        x = self.emb(tokens)
        with torch.utils.checkpoint.set_checkpoint_early_stop(self.early_stop):
            for block in self.blocks:
                x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
        return self.head(self.norm(x))


class FullRecomputeLM(CheckpointedLM):
    early_stop = False


def _optimizer(moves: set[str], kind: str, model):
    """The scenario's optimizer and LR scheduler (None: no scheduler)."""
    if "param_groups" not in moves:
        opt = make_optimizer(kind, model.parameters())
    else:  # norms and biases without weight decay, at another lr: a common split
        named = list(model.named_parameters())
        decay = [p for n, p in named if n.endswith("weight") and "norm" not in n]
        rest = [p for n, p in named if not (n.endswith("weight") and "norm" not in n)]
        opt = torch.optim.AdamW(
            [{"params": decay}, {"params": rest, "lr": 3e-3, "weight_decay": 0.0}],
            lr=1e-2,
            weight_decay=0.1,
        )
    sched = torch.optim.lr_scheduler.StepLR(opt, 1, 0.5) if "lr_scheduler" in moves else None
    return opt, sched


def _models(moves: set[str], world: int, dtypes, reshard: bool):
    """(FSDP2's model, minidp's model): equal weights, wrapped the scenario's way."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    param_dtype, reduce_dtype = dtypes if isinstance(dtypes, tuple) else (dtypes, None)
    make = DataclassLM if "dataclass_outputs" in moves else TinyLM
    if "activation_checkpointing" in moves:
        make = CheckpointedLM
    if "bf16_activation_checkpointing" in moves:  # the whole block recomputed
        make = FullRecomputeLM
    torch.manual_seed(0)
    reference = make()
    with torch.device("meta" if "meta_init" in moves else "cpu"):
        theirs, ours = make(), make()
    if "meta_init" not in moves:
        theirs.load_state_dict(reference.state_dict())
        ours.load_state_dict(reference.state_dict())
    if "frozen_norms" in moves:
        for model in (theirs, ours):
            for block in model.blocks:
                block.norm.requires_grad_(False)
    policy = {"param_dtype": param_dtype, "reduce_dtype": reduce_dtype}
    root_policy = policy
    if "bf16_blocks_only" in moves:
        policy, root_policy = {**policy, "output_dtype": torch.float32}, {}
    root = "root_unwrapped" not in moves
    mesh = init_device_mesh("cpu", (world,))

    def ignore(model) -> dict:
        return {"ignored_params": set(model.norm.parameters())} if "ignored_params" in moves else {}

    wrap(theirs, fully_shard, reshard, MixedPrecisionPolicy(**policy), mesh=mesh,
         root_policy=MixedPrecisionPolicy(**root_policy), wrap_root=root,
         **ignore(theirs))  # fmt: skip
    wrap(ours, minidp.fully_shard, reshard, minidp.MixedPrecisionPolicy(**policy),
         root_policy=minidp.MixedPrecisionPolicy(**root_policy), wrap_root=root,
         **ignore(ours))  # fmt: skip
    if "meta_init" in moves:  # the way large models are built: no full copy on any rank
        for model in (theirs, ours):
            model.to_empty(device="cpu")
        full = StateDictOptions(full_state_dict=True)
        set_model_state_dict(theirs, reference.state_dict(), options=full)
        load_full_state_dict(ours, reference.state_dict())
    if "float64_after_wrap" in moves:
        theirs.to(torch.float64), ours.to(torch.float64)
    return theirs, ours


def run_scenario(rank: int, world: int, name: str) -> list[tuple]:
    """Train FSDP2 and minidp side by side; return (step, tensor, what, max |diff|) rows."""
    opt_kind, dtypes, reshard, steps = SCENARIOS[name]
    moves = COMBINED.get(name, {name})
    theirs, ours = _models(moves, world, dtypes, reshard)
    micro = 2 if any(m.endswith("accumulate") for m in moves) else 1
    clip = 2.0 if "clip" in moves else float("inf") if "clip_inf_accumulate" in moves else None
    norms: dict[bool, torch.Tensor] = {}  # is FSDP2's -> this step's total norm
    evals: dict[bool, torch.Tensor] = {}  # is FSDP2's -> this step's eval logits
    (opt_t, sched_t), (opt_m, sched_m) = (_optimizer(moves, opt_kind, m) for m in (theirs, ours))
    rows = []
    for step, (tokens, target) in enumerate(batches(rank, steps)):
        if "freeze_after_wrap" in moves and step in (1, 2):
            for model in (theirs, ours):
                model.blocks[0].fc1.requires_grad_(step == 2)  # frozen for step 1 only
        for model, opt, sched in ((theirs, opt_t, sched_t), (ours, opt_m, sched_m)):
            opt.zero_grad()
            for i in range(micro):  # micro-batches: halves of the rows (one: all of them)
                part = slice(i * len(tokens) // micro, (i + 1) * len(tokens) // micro)
                if any(
                    "no_sync" in m for m in moves
                ):  # reduce-scatter only in the last micro-batch
                    model.set_requires_gradient_sync(i == micro - 1)
                loss = loss_fn(model, tokens[part], target[part])
                if "retain_graph" in moves:
                    loss.backward(retain_graph=True)
                loss.backward()
            if clip is not None:  # max_norm below the norms seen: every step clips
                norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5, norm_type=clip)
                norms[model is theirs] = norm.full_tensor() if model is theirs else norm
            opt.step()
            if sched is not None:
                sched.step()
            if "eval_between_steps" in moves:  # an evaluation pass between training steps
                model.eval()
                with torch.no_grad():
                    evals[model is theirs] = model(tokens)
                if model is theirs:  # FSDP2 leaves its root gathered after a forward;
                    model.reshard()  # minidp frees every unit after a no_grad one
                model.train()
        if evals:
            rows.append((step, "eval", "logits", diff(evals[False], evals[True])))
        if clip is not None:
            rows.append((step, "total norm", "clip", diff(norms[False], norms[True])))
        rows += _compare(step, theirs, ours)
        if "state_dict_resume" in moves and step == 0:
            ours, (opt_m, sched_m) = _resumed(moves, world, dtypes, reshard, ours, opt_m, sched_m)
    return rows


def _resumed(moves, world, dtypes, reshard, model, opt, sched):
    """A "crash": only the state dicts survive. A fresh model with other weights (every
    parameter overwritten by the load), a fresh optimizer and scheduler load them."""
    saved = copy.deepcopy(
        {"model": model.state_dict(), "optim": opt.state_dict(), "sched": sched.state_dict()}
    )
    del model, opt, sched
    _, fresh = _models(moves, world, dtypes, reshard)
    with torch.no_grad():
        for p in fresh.parameters():
            p.add_(1.0)  # not the trained weights: a skipped load would show
    fresh.load_state_dict(saved["model"])
    opt, sched = _optimizer(moves, "adamw", fresh)
    opt.load_state_dict(saved["optim"])
    sched.load_state_dict(saved["sched"])
    return fresh, (opt, sched)


def _compare(step: int, theirs, ours) -> list[tuple]:
    full, mine_by_name = full_state_dict(ours), dict(ours.named_parameters())
    rows = []
    for n, p in theirs.named_parameters():
        mine = mine_by_name.get(n)
        if mine is None:  # a name FSDP2 has and minidp not (a tie broken, say)
            rows.append((step, n, "missing", float("inf")))
            continue
        whole = p.full_tensor() if hasattr(p, "full_tensor") else p.detach()  # no unit's
        rows.append((step, n, "full", diff(full[n], whole)))
        rows.append((step, n, "shard", diff(_local(mine.detach()), _local(p.detach()))))
        rows.append((step, n, "grad", diff(_local(mine.grad), _local(p.grad))))
    return rows


def _local(t: torch.Tensor | None) -> torch.Tensor | None:
    """This rank's plain tensor: a DTensor's local part; None stays None."""
    return t.to_local() if hasattr(t, "to_local") else t


def trained_full_state(rank: int, world: int, dtypes=None) -> dict[str, torch.Tensor]:
    """minidp FSDP trained 2 steps at this world (``dtypes``: the policy's param dtype, or
    (param, reduce)); the full state dict (the same on every rank), for another world size
    to resume from."""
    _, ours = _models({"adamw"}, world, dtypes, True)
    opt = make_optimizer("adamw", ours.parameters())
    for tokens, target in batches(rank, 2):
        opt.zero_grad()
        loss_fn(ours, tokens, target).backward()
        opt.step()
    return full_state_dict(ours)


def resume_at(rank: int, world: int, state: dict[str, torch.Tensor], dtypes=None) -> list[tuple]:
    """Load a full state dict saved at another world size into FSDP2 and into minidp at
    this one, then train both 2 steps (fresh optimizers): (step, tensor, what, diff) rows."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    theirs, ours = _models({"adamw"}, world, dtypes, True)
    full = StateDictOptions(full_state_dict=True)  # (it replaces the dict's values: a copy)
    set_model_state_dict(theirs, dict(state), options=full)
    load_full_state_dict(ours, state)
    rows = _compare(-1, theirs, ours)  # right after loading
    opts = [make_optimizer("adamw", m.parameters()) for m in (theirs, ours)]
    for step, (tokens, target) in enumerate(batches(rank + 10, 2)):
        for model, opt in zip((theirs, ours), opts):
            opt.zero_grad()
            loss_fn(model, tokens, target).backward()
            opt.step()
        rows += _compare(step, theirs, ours)
    return rows
