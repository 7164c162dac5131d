"""Rank-side runners for the HSDP tests (no tests here): minidp beside FSDP2 on a 2-D mesh.

``hsdp_vs_fsdp2`` builds the same seeded ``TinyLM`` twice, wraps it with FSDP2's
``fully_shard(mesh=<2-D mesh>)`` and with minidp's (each block, then the root), and trains
both side by side on each rank's own data. After every step it reports, per parameter, the
full tensor, this rank's shard and the shard's gradient (``fsdp_scenarios._compare``).

Functions sent to rank processes must be module-level, so they live here.
"""

from __future__ import annotations

import torch
from fsdp_scenarios import _compare
from test_fsdp_support import TinyLM, batches, loss_fn, make_optimizer, wrap

import minidp

NAMES = ("replicate", "shard")


def hsdp_vs_fsdp2(rank: int, world: int, shape: tuple, dtypes, moves: tuple = ()) -> dict:
    """(step, tensor, what, max |diff|) rows, the clip norms, and each dim's group ranks."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    param_dtype, reduce_dtype = dtypes if isinstance(dtypes, tuple) else (dtypes, None)
    theirs_mesh = init_device_mesh("cpu", shape, mesh_dim_names=NAMES)
    ours_mesh = minidp.init_device_mesh("cpu", shape, mesh_dim_names=NAMES)
    torch.manual_seed(0)  # FSDP2 broadcasts nothing: every rank builds the same weights
    reference = TinyLM()
    theirs, ours = TinyLM(), TinyLM()
    theirs.load_state_dict(reference.state_dict())
    ours.load_state_dict(reference.state_dict())
    policy = {"param_dtype": param_dtype, "reduce_dtype": reduce_dtype}
    wrap(theirs, fully_shard, True, MixedPrecisionPolicy(**policy), mesh=theirs_mesh)
    wrap(ours, minidp.fully_shard, True, minidp.MixedPrecisionPolicy(**policy), mesh=ours_mesh)
    opts = [make_optimizer("adamw", m.parameters()) for m in (theirs, ours)]
    micro = 2 if "no_sync_accumulate" in moves else 1
    rows, norms = [], []
    for step, (tokens, target) in enumerate(batches(rank, 3)):
        step_norms = []
        for model, opt in zip((theirs, ours), opts):
            opt.zero_grad()
            for i in range(micro):  # the first micro-batch without any reduction
                part = slice(i * len(tokens) // micro, (i + 1) * len(tokens) // micro)
                model.set_requires_gradient_sync(i == micro - 1)
                loss_fn(model, tokens[part], target[part]).backward()
            if "clip" in moves:
                norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
                step_norms.append(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
            opt.step()
        norms.append([float(n) for n in step_norms])
        rows += _compare(step, theirs, ours)
    groups = {n: dist.get_process_group_ranks(ours_mesh[n].get_group()) for n in NAMES}
    return {"rows": rows, "norms": norms, "groups": groups}
