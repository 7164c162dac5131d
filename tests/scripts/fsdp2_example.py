"""An FSDP2 training script in the style of pytorch/examples' FSDP2 example, for FSDP2 or minidp.

The only difference between the two runs is the import block marked below (chosen here by
``FSDP2_EXAMPLE_IMPL=torch|minidp``, so one file serves both): everything else is FSDP2's
ordinary recipe — build the model on the meta device, ``fully_shard`` each layer then the
root, check the DTensor parameters (``FSDPModule``, ``Shard(0)``), ``to_empty`` +
``reset_parameters``, ``MixedPrecisionPolicy`` (bf16 compute, fp32 reductions), explicit
prefetching with ``model.unshard()`` before each forward, ``clip_grad_norm_``, and a
checkpointer that saves full state dicts (DCP's ``get_model_state_dict``/
``get_optimizer_state_dict``, or ``full_tensor()`` per parameter) and resumes from them.

    torchrun --nproc-per-node 2 tests/scripts/fsdp2_example.py OUT_DIR [--resume] \
        [--explicit-prefetching] [--mixed-precision] [--dcp-api]

Rank 0 writes ``OUT_DIR/step<N>.pt`` (model and optimizer, full tensors) and
``OUT_DIR/losses<start>.pt``. ``tests/test_fsdp2_example.py`` runs it both ways and compares.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.tensor import DTensor, Shard, distribute_tensor

# -- the one line a user swaps (BEGIN) --
if os.environ.get("FSDP2_EXAMPLE_IMPL", "torch") == "minidp":
    from minidp import FSDPModule, MixedPrecisionPolicy, fully_shard
else:
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
# -- the one line a user swaps (END) --

VOCAB, DIM, HEADS, LAYERS, SEQ, BATCH = 64, 32, 4, 3, 16, 4


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn_norm = nn.LayerNorm(DIM)
        self.attn = nn.MultiheadAttention(DIM, HEADS, batch_first=True)
        self.mlp_norm = nn.LayerNorm(DIM)
        self.up, self.down = nn.Linear(DIM, 4 * DIM), nn.Linear(4 * DIM, DIM)

    def forward(self, x):
        h = self.attn_norm(x)
        mask = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool, device=x.device).triu(1)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.down(F.gelu(self.up(self.mlp_norm(x))))

    def reset_parameters(self) -> None:
        for m in (self.attn_norm, self.mlp_norm, self.up, self.down, self.attn.out_proj):
            m.reset_parameters()
        self.attn._reset_parameters()  # (in_proj; it zeroes out_proj's bias)


class Transformer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok_embeddings = nn.Embedding(VOCAB, DIM)
        self.pos_embeddings = nn.Embedding(SEQ, DIM)
        self.layers = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.LayerNorm(DIM)
        self.output = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, tokens):
        pos = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tok_embeddings(tokens) + self.pos_embeddings(pos)
        for layer in self.layers:
            x = layer(x)
        return self.output(self.norm(x)).float()

    def reset_parameters(self) -> None:
        for m in (self.tok_embeddings, self.pos_embeddings, self.norm, self.output):
            m.reset_parameters()
        for layer in self.layers:
            layer.reset_parameters()


def inspect_model(model: nn.Module) -> None:
    assert isinstance(model, Transformer) and isinstance(model, FSDPModule), type(model)
    for p in model.parameters():
        assert isinstance(p, DTensor) and p.placements == (Shard(0),), p.placements
        assert p.dtype == torch.float32


def inspect_mixed_precision(model: nn.Module) -> None:
    model.unshard()  # the root's own parameters: all but the layers'
    for name, p in model.named_parameters():
        if not name.startswith("layers."):
            assert p.dtype == torch.bfloat16 and not isinstance(p, DTensor), (name, p.dtype)
    model.reshard()


class Checkpointer:
    """Full state dicts on rank 0: DCP's API, or the parameters' own ``full_tensor()``."""

    def __init__(self, folder: str, dcp_api: bool) -> None:
        self.folder, self.dcp_api = folder, dcp_api
        self.full = StateDictOptions(full_state_dict=True, cpu_offload=True)

    def save(self, model, opt, step: int) -> None:
        if self.dcp_api:
            model_sd = get_model_state_dict(model, options=self.full)
        else:
            model_sd = {k: v.full_tensor() for k, v in model.state_dict().items()}
        optim_sd = get_optimizer_state_dict(model, opt, options=self.full)
        if dist.get_rank() == 0:
            torch.save({"model": model_sd, "optim": optim_sd}, f"{self.folder}/step{step}.pt")

    def load_model(self, model, step: int) -> dict:
        saved = torch.load(f"{self.folder}/step{step}.pt", weights_only=True)
        if self.dcp_api:
            options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
            set_model_state_dict(model, saved["model"], options=options)
        else:
            sharded = {
                k: nn.Parameter(distribute_tensor(saved["model"][k], p.device_mesh, p.placements))
                for k, p in model.state_dict().items()
            }
            model.load_state_dict(sharded, assign=True)
        return saved["optim"]

    def load_optim(self, model, opt, optim_sd: dict) -> None:
        options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
        set_optimizer_state_dict(model, opt, optim_sd, options=options)


def main(args) -> list[float]:
    rank = dist.get_rank()
    torch.manual_seed(0)
    with torch.device("meta"):
        model = Transformer()
    kwargs = {}
    if args.mixed_precision:
        kwargs["mp_policy"] = MixedPrecisionPolicy(
            param_dtype=torch.bfloat16, reduce_dtype=torch.float32
        )
    for layer in model.layers:
        fully_shard(layer, **kwargs)
    fully_shard(model, **kwargs)
    inspect_model(model)
    if args.explicit_prefetching:
        layers = list(model.layers)
        for i, layer in enumerate(layers):
            layer.set_modules_to_forward_prefetch(layers[i + 1 : i + 3])
            layer.set_modules_to_backward_prefetch(layers[max(0, i - 2) : i][::-1])
    checkpointer = Checkpointer(args.out, args.dcp_api)
    model.to_empty(device="cpu")
    optim_sd = None
    if args.resume:
        optim_sd = checkpointer.load_model(model, args.start)
    else:
        model.reset_parameters()
    if args.mixed_precision:
        inspect_mixed_precision(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    if optim_sd is not None:
        checkpointer.load_optim(model, opt, optim_sd)
    g = torch.Generator().manual_seed(100 * args.start + rank)  # each rank its own data
    losses = []
    for _ in range(args.steps):
        if args.explicit_prefetching:
            model.unshard()
        tokens = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=g)
        loss = F.cross_entropy(model(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach())
    checkpointer.save(model, opt, args.start + args.steps)
    if rank == 0:
        torch.save(torch.stack(losses), f"{args.out}/losses{args.start}.pt")
    return [float(x) for x in losses]


def parse(argv: list[str]):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--resume", action="store_true", help="load step<steps>.pt first")
    parser.add_argument("--explicit-prefetching", action="store_true")
    parser.add_argument("--mixed-precision", action="store_true")
    parser.add_argument("--dcp-api", action="store_true")
    args = parser.parse_args(argv)
    args.start = args.steps if args.resume else 0
    return args


if __name__ == "__main__":
    dist.init_process_group("gloo")
    try:
        main(parse(sys.argv[1:]))
    finally:
        dist.destroy_process_group()
