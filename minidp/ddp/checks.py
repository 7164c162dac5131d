"""Checks that turn DDP's silent failures (hangs, garbage) into errors that say what to fix.

Local checks look at the module alone, before any communication. Cross-rank checks
(:func:`verify_same_model`) ``all_gather`` a small table, so *every* rank raises the same
error together (if only the odd rank raised, the others would hang in the next collective).

Test: ``pytest tests/test_ddp_errors.py``
"""

from __future__ import annotations

import weakref

import torch

from minidp.comm import all_gather, ops

_wrapped: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # module -> its live DDP
_DTYPES = [*ops.DTYPES, torch.complex64, torch.complex128, torch.bool]  # + a buffer's others
_DIMS = 7  # shape dims kept in the table; more are folded into numel


def trainable_parameters(module: torch.nn.Module) -> tuple[list, list[str]]:
    """Parameters that require grad, module by module, tied ones once; and their names.
    torch's order: it decides the first bucket layout, so the bits depend on it."""
    names = {}
    for name, p in module.named_parameters():  # first name wins for tied parameters
        names.setdefault(p, name)
    params, seen = [], set()
    for _, sub in module.named_modules():
        for _, p in sub.named_parameters(recurse=False):
            if p.requires_grad and p not in seen:
                seen.add(p)
                params.append(p)
    return params, [names[p] for p in params]


def check_module(module, wrapper_types: tuple) -> None:
    """Raise for modules DDP cannot wrap; runs before any communication."""
    if not isinstance(module, torch.nn.Module):
        raise TypeError(
            f"DistributedDataParallel: expected a torch.nn.Module, got {type(module).__name__}"
        )
    for name, sub in module.named_modules():
        if isinstance(sub, wrapper_types) or (sub in _wrapped and _wrapped[sub]() is not None):
            where = "the module" if not name else f"its submodule {name!r}"
            raise ValueError(
                f"DistributedDataParallel: {where} is already wrapped in a "
                f"DistributedDataParallel — expected a plain module, got one that would have "
                "its gradients reduced twice. Hint: wrap the inner module once "
                "(DistributedDataParallel(ddp.module)), or drop the old wrapper first"
            )
    for name, sub in module.named_modules():
        if isinstance(sub, (torch.nn.Embedding, torch.nn.EmbeddingBag)) and sub.sparse:
            raise ValueError(
                f"DistributedDataParallel: {name or 'the module'!r} makes sparse gradients "
                "(sparse=True) — expected dense gradients: minidp's buckets are flat dense "
                "buffers. Hint: construct the embedding with sparse=False"
            )
    params = list(module.named_parameters())
    for name, p in params:
        if p.requires_grad and p.is_complex():
            raise ValueError(
                f"DistributedDataParallel: parameter {name!r} is {p.dtype} — expected real "
                "parameters: minidp's buckets and collectives carry real dtypes only. Hint: "
                "store it as a real tensor with a trailing dim of 2 (torch.view_as_real) and "
                "use torch.view_as_complex(...) in forward"
            )
    if not any(p.requires_grad for _, p in params):
        raise RuntimeError(
            f"DistributedDataParallel: the module has no parameter that requires a gradient "
            f"(it has {len(params)} parameters, all frozen) — there is nothing to "
            "synchronize. Hint: set requires_grad=True on what you train, or do not wrap it"
        )
    devices = sorted({str(p.device) for _, p in params})
    if len(devices) > 1:
        per_device = {d: next(n for n, p in params if str(p.device) == d) for d in devices}
        listing = ", ".join(f"{n!r} on {d}" for d, n in per_device.items())
        raise ValueError(
            f"DistributedDataParallel: expected every parameter on one device, got "
            f"parameters on {len(devices)} devices ({listing}). Hint: module.to(device) "
            "before wrapping; minidp's DDP runs one device per rank"
        )


def mark_wrapped(module: torch.nn.Module, ddp) -> None:
    _wrapped[module] = weakref.ref(ddp)


def _row(p: torch.Tensor, bucket: int) -> list[int]:
    dims = list(p.shape[:_DIMS]) + [-1] * (_DIMS - min(p.dim(), _DIMS))
    dtype = _DTYPES.index(p.dtype) if p.dtype in _DTYPES else 99
    return [p.dim(), p.numel(), dtype, bucket, *dims]


def _shape(row: list[int]) -> str:
    dims = [d for d in row[4:] if d >= 0][: row[0]]
    dtype = _DTYPES[row[2]] if row[2] < len(_DTYPES) else "?"
    return f"{tuple(dims)} {str(dtype).replace('torch.', '')}"


def verify_same_model(
    group, params: list, names: list[str], bucket_of: list[int], buffers=None, options=None
) -> None:
    """Raise on every rank unless all ranks have the same parameters and bucket layout, and
    (if given) the same buffers ``[(name, tensor)]`` and boolean ``options`` ``{name: value}``:
    first the counts and options (fixed size, cannot mismatch), then a row (shape, dtype,
    bucket) per parameter and buffer (buffers travel flat: a misshapen one shifts the rest).
    """
    world, rank = group.size(), group.rank()
    if world == 1:
        return
    buffers = list(buffers or [])
    options = dict(options or {})
    head = torch.tensor(
        [len(params), max(bucket_of) + 1, len(buffers), *map(int, options.values())],
        dtype=torch.int64,
    )
    heads = [torch.empty_like(head) for _ in range(world)]
    all_gather(heads, head, group)
    for r in range(world):
        for k, name in enumerate(options, start=3):
            if heads[r][k] != heads[0][k]:
                raise RuntimeError(
                    f"DistributedDataParallel: expected the same options on every rank, but "
                    f"rank {r} has {name}={bool(heads[r][k])} while rank 0 has "
                    f"{name}={bool(heads[0][k])} (this is rank {rank}). The option decides "
                    "which collectives each step runs. Hint: pass the same arguments to "
                    "DistributedDataParallel on every rank"
                )
        for field, what in ((0, "parameters that require grad"), (2, "buffers")):
            if heads[r][field] != heads[0][field]:
                raise RuntimeError(
                    f"DistributedDataParallel: expected the same model on every rank, but rank "
                    f"{r} has {int(heads[r][field])} {what} while rank 0 has "
                    f"{int(heads[0][field])} (this is rank {rank}). Hint: build the model "
                    "identically on every rank (same code, same config)"
                )
    rows = [_row(p, b) for p, b in zip(params, bucket_of)] + [_row(t, -1) for _, t in buffers]
    labels = [f"parameter {i} ({n!r} on rank {rank})" for i, n in enumerate(names)]
    labels += [f"buffer {n!r}" for n, _ in buffers]
    table = torch.tensor(rows, dtype=torch.int64)
    tables = [torch.empty_like(table) for _ in range(world)]
    all_gather(tables, table, group)
    for r in range(1, world):
        for i, label in enumerate(labels):
            ref, got = tables[0][i].tolist(), tables[r][i].tolist()
            if ref[:3] + ref[4:] != got[:3] + got[4:]:
                raise RuntimeError(
                    f"DistributedDataParallel: expected the same model on every rank, but "
                    f"{label} has shape {_shape(got)} on rank {r} and {_shape(ref)} on "
                    "rank 0. Hint: build the model identically on every rank; a "
                    "rank-dependent layer size is the usual cause"
                )
    n = len(params)
    for r in range(1, world):
        if not torch.equal(tables[r][:n, 3], tables[0][:n, 3]) or heads[r][1] != heads[0][1]:
            raise RuntimeError(
                f"DistributedDataParallel: expected the same buckets on every rank, but rank "
                f"{r} has {int(heads[r][1])} buckets and rank 0 has {int(heads[0][1])} (or "
                f"they hold different parameters). Every bucket is one all-reduce, so the "
                "ranks would disagree about what to send. Hint: pass the same bucket_cap_mb "
                "and find_unused_parameters on every rank"
            )


def unfinished_reduction_message(rank: int, missing: list[int], names, find_unused: bool) -> str:
    """torch's wording for "the last backward left parameters without gradient", plus names."""
    hint = (
        "Since find_unused_parameters=True, this likely means that not all forward "
        "outputs took part in computing the loss: make every output reach the loss."
        if find_unused
        else "Either pass find_unused_parameters=True to DistributedDataParallel, or make "
        "every parameter (and every forward output) take part in computing the loss."
    )
    return (
        "Expected to have finished reduction in the prior iteration before starting a "
        "new one. This error indicates that your module has parameters that were not "
        f"used in producing loss. {hint}\nParameter indices which did not receive grad "
        f"for rank {rank}: {' '.join(map(str, missing))}\nParameters which did not "
        f"receive grad for rank {rank}: {', '.join(names[i] for i in missing)}"
    )
