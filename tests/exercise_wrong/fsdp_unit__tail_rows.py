"""Wrong on purpose: the gradient shard is cut from the end of the padded piece."""

import torch

from minidp.comm import all_gather, reduce_scatter


def fsdp_unit(module, shards, x, grad_out, group):
    w = group.size()
    params = dict(module.named_parameters())
    full = {}
    for name, s in shards.items():
        k = -(-params[name].shape[0] // w)
        piece = torch.cat([s, s.new_zeros((k - s.shape[0], *s.shape[1:]))])
        gathered = [torch.empty_like(piece) for _ in range(w)]
        all_gather(gathered, piece, group)
        full[name] = torch.cat(gathered)[: params[name].shape[0]].detach().requires_grad_(True)
    out = torch.func.functional_call(module, full, (x,))
    out.backward(grad_out)
    result = {}
    for name, s in shards.items():
        g, k = full[name].grad, -(-params[name].shape[0] // w)
        g = torch.cat([g, g.new_zeros((k * w - g.shape[0], *g.shape[1:]))])
        mine = torch.empty_like(g[:k])
        reduce_scatter(mine, list(g.chunk(w)), "avg", group)
        result[name] = mine[mine.shape[0] - s.shape[0] :]
    return out, result
