"""All-gather, barrier — and ``all_reduce``, which picks its algorithm.

Test: ``pytest tests/test_collectives.py``

``torch.distributed``'s signatures, built from ``p2p`` and checked first (``agree.py``).
``all_gather`` (and ``all_gather_into_tensor``) is one trip round the ring
(``ring.ring_pass``); ``barrier`` is the all-to-all header exchange alone; ``broadcast`` is
in ``broadcasts.py``, ``reduce_scatter`` in ``reduce_scatters.py``.
"""

from __future__ import annotations

import torch

from minidp.comm import agree, p2p
from minidp.comm import group as groups
from minidp.comm.direct import direct_all_reduce, small_bytes
from minidp.comm.naive import naive_all_reduce
from minidp.comm.ring import ring_all_reduce, ring_pass

ALGORITHMS = ("auto", "ring", "direct", "naive")
_SEGMENT_BYTES = 1 << 20  # pipeline all-gather / reduce-scatter in 1 MiB messages, like gloo


def all_reduce(tensor: torch.Tensor, op="sum", group=None, algorithm: str = "auto") -> torch.Tensor:
    """All-reduce in place with ``algorithm``; returns ``tensor``. "auto": "direct" (one
    exchange, the data with the header) up to ``direct.small_bytes(world)`` (1 MiB at 2
    ranks, 256 KiB from 3), else "ring" (fewest bytes), both with gloo's bits; "naive" is
    there to compare. Every rank must pass the same one."""
    if algorithm == "auto":
        small = isinstance(tensor, torch.Tensor) and tensor.numel() * tensor.element_size()
        g = groups.resolve(group)
        world = g.size() if groups.is_member(g) else 0  # (a non-member skips it anyway)
        algorithm = "direct" if small and small <= small_bytes(world) else "ring"
        group = g  # resolved once
    if algorithm == "direct":
        return direct_all_reduce(tensor, op, group)
    if algorithm == "ring":
        return ring_all_reduce(tensor, op, group)
    if algorithm == "naive":
        return naive_all_reduce(tensor, op, group)
    raise ValueError(f"all_reduce: algorithm must be one of {ALGORITHMS}, got {algorithm!r}")


def _even_chunks(n: int, world: int, element_size: int) -> tuple[list[tuple[int, int]], int]:
    seg = max(_SEGMENT_BYTES // element_size, 1)
    return [(i * n, (i + 1) * n) for i in range(world)], max(min(seg, n), 1)


@torch.no_grad()  # like c10d: a collective is not part of the autograd graph
def all_gather(tensor_list: list[torch.Tensor], tensor: torch.Tensor, group=None) -> list:
    """Fill ``tensor_list[r]`` with rank r's ``tensor`` on every rank (ring); returns the list."""
    g = groups.resolve(group)
    if groups.skip_if_not_member(g, "all_gather"):
        return tensor_list
    world = g.size()
    with p2p.operation("all_gather"):
        agree.agree(
            g, "all_gather", tensor, None, extra=len(tensor_list), extra_name="len(tensor_list)"
        )
        if len(tensor_list) != world:
            raise ValueError(
                f"all_gather: tensor_list has {len(tensor_list)} tensors but the group has "
                f"{world} ranks — pass one output tensor per rank"
            )
        for i, out in enumerate(tensor_list):
            if out.numel() != tensor.numel() or out.dtype != tensor.dtype:
                raise ValueError(
                    f"all_gather: tensor_list[{i}] is {tuple(out.shape)} {out.dtype} but the input "
                    f"is {tuple(tensor.shape)} {tensor.dtype} — outputs must match the input"
                )
        n = tensor.numel()
        flat = torch.empty(world * n, dtype=tensor.dtype, device=tensor.device)  # (world * n,)
        _gather_pass(flat, tensor, g)
        for i, out in enumerate(tensor_list):
            out.copy_(flat[i * n : (i + 1) * n].view(out.shape))
        return tensor_list


@torch.no_grad()
def all_gather_into_tensor(output: torch.Tensor, input: torch.Tensor, group=None) -> torch.Tensor:
    """Rank r's ``input`` into ``output[r*n:(r+1)*n]`` (contiguous, ``world * n``) on every
    rank; returns ``output``. No buffer of its own: ``input`` may be a slice of ``output``."""
    g = groups.resolve(group)
    if groups.skip_if_not_member(g, "all_gather"):
        return output
    world = g.size()
    with p2p.operation("all_gather_into_tensor"):
        agree.agree(g, "all_gather", input, None, extra=world, extra_name="len(tensor_list)")
        if (
            output.numel() != world * input.numel()
            or output.dtype != input.dtype
            or not output.is_contiguous()
        ):
            raise ValueError(
                f"all_gather_into_tensor: expected a contiguous {input.dtype} output of "
                f"{world} x {input.numel()} elements, got {tuple(output.shape)} {output.dtype}"
                f"{'' if output.is_contiguous() else ' (not contiguous)'} — one input's worth "
                "per rank"
            )
        _gather_pass(output.view(-1), input, g)
        return output


def _gather_pass(flat: torch.Tensor, tensor: torch.Tensor, g) -> None:
    """This rank's ``tensor`` into its slot of ``flat`` (``(world * n,)``), then the ring."""
    rank, world, n = g.rank(), g.size(), tensor.numel()
    flat[rank * n : (rank + 1) * n] = tensor.reshape(-1)
    if n and world > 1:
        chunks, seg = _even_chunks(n, world, tensor.element_size())
        ring_pass(flat, chunks, seg, g, None, 0, world - 1)


def barrier(group=None) -> None:
    """Return only once every rank of the group has called ``barrier``."""
    g = groups.resolve(group)
    if groups.skip_if_not_member(g, "barrier"):
        return
    with p2p.operation("barrier"):
        agree.agree(g, "barrier")
