"""Broadcast, all-gather, reduce-scatter, barrier — and ``all_reduce``, which picks its algorithm.

Test: ``pytest tests/test_collectives.py``

``torch.distributed``'s signatures, built from ``p2p`` and checked first (``agree.py``).
``all_gather`` and ``reduce_scatter`` (and their ``*_tensor`` forms) are one trip round
the ring (``ring.ring_pass``); ``barrier`` is the all-to-all header exchange alone;
``broadcast`` is in ``broadcasts.py``.
"""

from __future__ import annotations

import torch

from minidp.comm import agree, ops, p2p
from minidp.comm import group as groups
from minidp.comm.direct import SMALL_BYTES, direct_all_reduce
from minidp.comm.naive import naive_all_reduce
from minidp.comm.ring import ring_all_reduce, ring_pass

ALGORITHMS = ("auto", "ring", "direct", "naive", "textbook")
_SEGMENT_BYTES = 1 << 20  # pipeline all-gather / reduce-scatter in 1 MiB messages, like gloo


def all_reduce(tensor: torch.Tensor, op="sum", group=None, algorithm: str = "auto") -> torch.Tensor:
    """All-reduce in place with ``algorithm``; returns ``tensor``. "auto": "direct" (one
    exchange) up to ``SMALL_BYTES``, else "ring" (fewest bytes), both with gloo's bits;
    "naive" and "textbook" are there to compare. Every rank must pass the same one."""
    if algorithm == "auto":
        small = isinstance(tensor, torch.Tensor) and tensor.numel() * tensor.element_size()
        algorithm = "direct" if small and small <= SMALL_BYTES else "ring"
    if algorithm == "direct":
        return direct_all_reduce(tensor, op, group)
    if algorithm == "ring":
        return ring_all_reduce(tensor, op, group)
    if algorithm == "textbook":
        return ring_all_reduce(tensor, op, group, layout="textbook")
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


@torch.no_grad()  # like c10d: a collective is not part of the autograd graph
def reduce_scatter(output: torch.Tensor, input_list: list[torch.Tensor], op="sum", group=None):
    """``output`` on rank r = reduction over ranks of ``input_list[r]`` (ring); returns it."""
    g = groups.resolve(group)
    if groups.skip_if_not_member(g, "reduce_scatter"):
        return output
    world = g.size()
    with p2p.operation("reduce_scatter"):
        name = agree.agree_reduce(
            g, "reduce_scatter", output, op, "reduce_scatter", len(input_list), "len(input_list)"
        )
        if len(input_list) != world:
            raise ValueError(
                f"reduce_scatter: input_list has {len(input_list)} tensors but the group has "
                f"{world} ranks — pass one input tensor per rank"
            )
        n = output.numel()
        for i, t in enumerate(input_list):
            if t.numel() != n or t.dtype != output.dtype:
                raise ValueError(
                    f"reduce_scatter: input_list[{i}] is {tuple(t.shape)} {t.dtype} but output is "
                    f"{tuple(output.shape)} {output.dtype} — every input must match the output"
                )
        flat = torch.cat([t.reshape(-1) for t in input_list])  # (world * numel,) rank-local copy
        return _scatter_pass(output, flat, name, g)


@torch.no_grad()
def reduce_scatter_tensor(
    output: torch.Tensor,
    input: torch.Tensor,
    op="sum",
    group=None,
    *,
    input_is_scratch: bool = False,
) -> torch.Tensor:
    """``output`` on rank r = reduction over ranks of ``input[r*n:(r+1)*n]`` (contiguous,
    ``world * n``); returns ``output``. ``input_is_scratch=True`` (minidp's own keyword)
    lends ``input`` to the ring as its working buffer, leaving it undefined: one copy of
    the whole input less, for a caller that refills it anyway (ZeRO-2's send buffers)."""
    g = groups.resolve(group)
    if groups.skip_if_not_member(g, "reduce_scatter"):
        return output
    world = g.size()
    with p2p.operation("reduce_scatter_tensor"):
        name = agree.agree_reduce(
            g, "reduce_scatter", output, op, "reduce_scatter", world, "len(input_list)"
        )
        if (
            input.numel() != world * output.numel()
            or input.dtype != output.dtype
            or not input.is_contiguous()
        ):
            raise ValueError(
                f"reduce_scatter_tensor: expected a contiguous {output.dtype} input of "
                f"{world} x {output.numel()} elements, got {tuple(input.shape)} {input.dtype}"
                f"{'' if input.is_contiguous() else ' (not contiguous)'} — one output's worth "
                "per rank"
            )
        flat = input.view(-1) if input_is_scratch else input.reshape(-1).clone()
        return _scatter_pass(output, flat, name, g)


def _scatter_pass(output: torch.Tensor, flat: torch.Tensor, name: str, g) -> torch.Tensor:
    """The ring over ``flat`` (``(world * n,)``, worked in place), then this rank's sum."""
    rank, world, n = g.rank(), g.size(), output.numel()
    if n and world > 1:
        chunks, seg = _even_chunks(n, world, output.element_size())
        ring_pass(flat, chunks, seg, g, name, world - 1, 0)
    mine = flat[rank * n : (rank + 1) * n]
    ops.finish(name, mine, world)
    output.copy_(mine.view(output.shape))
    return output


def barrier(group=None) -> None:
    """Return only once every rank of the group has called ``barrier``."""
    g = groups.resolve(group)
    if groups.skip_if_not_member(g, "barrier"):
        return
    with p2p.operation("barrier"):
        agree.agree(g, "barrier")
