"""The book's collectives: each one short enough to read top to bottom in a sitting.

Read them in lessons 7-9 (``python lessons/08_ring_all_reduce.py``); write them yourself in
``lessons/exercises/`` and check them with ``python -m minidp exercise check
ring_all_reduce`` (and ``naive_all_reduce``, ``all_gather``, ``reduce_scatter``,
``broadcast``). Test: ``pytest tests/test_textbook_comm.py``.

Every function here uses plain blocking ``send``/``recv`` from minidp's point-to-point
layer (``comm/p2p.py``) plus one ``isend`` per step, so neighbours can send and receive at
the same time. The ring runs to the *left*, as gloo's does: rank r sends to ``r-1`` and
receives from ``r+1`` — the one direction of every ring in minidp: the engine's, and this
one, which the demo (``python -m minidp demo ring``) and the classroom run. The later
pages (DDP, ZeRO, FSDP, HSDP) communicate through these functions only.
"""

from __future__ import annotations

import torch

from minidp.comm import group as groups
from minidp.comm import ops, p2p


def _exchange(send_buf: torch.Tensor, recv_buf: torch.Tensor, group) -> None:
    """Send ``send_buf`` to the left neighbour while receiving ``recv_buf`` from the right.

    Why ``isend`` and not ``send``: a send completes only once the receiver has posted its
    receive, so if every rank first did a blocking send, nobody would reach its receive.
    Empty buffers (numel < world gives empty chunks) are skipped on both sides.
    """
    rank, world = group.rank(), group.size()
    sending = p2p.isend(send_buf, (rank - 1) % world, group) if send_buf.numel() else None
    if recv_buf.numel():
        p2p.recv(recv_buf, (rank + 1) % world, group)
    if sending is not None:
        sending.wait()


@torch.no_grad()
def ring_all_reduce(tensor: torch.Tensor, op="sum", group=None) -> torch.Tensor:
    """All-reduce ``tensor`` in place with a ring: reduce-scatter, then all-gather.

    Chunk ``c`` starts on rank ``c-1`` and travels left, each rank adding its own piece
    (``mine + incoming``), so it is reduced in the order
    ``x[c] + (x[c+1] + (... + (x[c-2] + x[c-1])))`` (indices mod world) — gloo's — and
    ends on rank c.
    """
    g = groups.resolve(group)
    rank, world = g.rank(), g.size()
    name = ops.normalize_op(op, "textbook.ring_all_reduce")
    ops.check_dtype(tensor, name, "textbook.ring_all_reduce")
    flat = tensor.contiguous().view(-1)  # (numel,); a copy only if tensor is not contiguous
    chunks = flat.tensor_split(world)  # world views, the first numel % world one longer
    # Reduce-scatter, world-1 steps: at step s send the partial sum of chunk r+1+s and
    # receive chunk r+2+s's partial sum, then add my piece to it. The last chunk received
    # (step world-2) is chunk r: rank r ends owning chunk r, fully reduced.
    for step in range(world - 1):
        send_c, recv_c = (rank + 1 + step) % world, (rank + 2 + step) % world
        incoming = torch.empty_like(chunks[recv_c])  # (len of chunk recv_c,)
        _exchange(chunks[send_c], incoming, g)
        ops.combine(name, chunks[recv_c], incoming)  # mine = mine OP incoming
    ops.finish(name, chunks[rank], world)  # avg: divide once, on the finished chunk
    # All-gather, world-1 steps: pass the finished chunks on. At step s send chunk r+s
    # (first my own) and receive the finished chunk r+s+1 straight into place.
    for step in range(world - 1):
        send_c, recv_c = (rank + step) % world, (rank + step + 1) % world
        _exchange(chunks[send_c], chunks[recv_c], g)
    if flat.data_ptr() != tensor.data_ptr():  # non-contiguous input: copy the result back
        tensor.copy_(flat.view(tensor.shape))
    return tensor


@torch.no_grad()
def naive_all_reduce(tensor: torch.Tensor, op="sum", group=None) -> torch.Tensor:
    """All-reduce ``tensor`` in place through rank 0, the parameter server; returns it.

    Every rank sends its whole tensor to rank 0, which reduces in rank order
    (``((x0 OP x1) OP x2) ...``) and sends the result back: rank 0's link carries
    ``2(n-1)`` tensors, the ring's every link ``2(n-1)/n`` — the ring's whole point.
    """
    g = groups.resolve(group)
    rank, world = g.rank(), g.size()
    name = ops.normalize_op(op, "textbook.naive_all_reduce")
    ops.check_dtype(tensor, name, "textbook.naive_all_reduce")
    flat = tensor.contiguous().view(-1)  # (numel,)
    if flat.numel() == 0:
        return tensor
    if rank == 0:
        incoming = torch.empty_like(flat)
        for r in range(1, world):  # one rank at a time, in rank order
            p2p.recv(incoming, r, g)
            ops.combine(name, flat, incoming)
        ops.finish(name, flat, world)
        for r in range(1, world):
            p2p.send(flat, r, g)
    else:
        p2p.send(flat, 0, g)
        p2p.recv(flat, 0, g)
    if flat.data_ptr() != tensor.data_ptr():
        tensor.copy_(flat.view(tensor.shape))
    return tensor


@torch.no_grad()
def all_gather(tensor_list: list[torch.Tensor], tensor: torch.Tensor, group=None) -> list:
    """Fill ``tensor_list[i]`` with rank i's ``tensor`` on every rank; returns the list.

    The all-gather half of the ring: every rank starts with its own row and, in world-1
    steps, passes on the row it received last.
    """
    g = groups.resolve(group)
    rank, world = g.rank(), g.size()
    if len(tensor_list) != world:
        raise ValueError(
            f"textbook.all_gather: expected one output tensor per rank ({world}), got "
            f"{len(tensor_list)}. Hint: tensor_list = [torch.empty_like(t) for _ in range(world)]"
        )
    rows = torch.empty(
        (world, tensor.numel()), dtype=tensor.dtype, device=tensor.device
    )  # (world, numel) rank-local
    rows[rank] = tensor.reshape(-1)
    for step in range(world - 1):  # step s: send row r+s, receive row r+s+1 from the right
        _exchange(rows[(rank + step) % world], rows[(rank + step + 1) % world], g)
    for i, out in enumerate(tensor_list):
        out.copy_(rows[i].view(out.shape))
    return tensor_list


@torch.no_grad()
def reduce_scatter(output: torch.Tensor, input_list: list[torch.Tensor], op="sum", group=None):
    """``output`` on rank r = ``input_list[r]`` reduced over all ranks; returns ``output``.

    The reduce-scatter half of the ring, with one row per rank: row c starts on rank c-1,
    travels left collecting every rank's piece, and is finished on rank c.
    """
    g = groups.resolve(group)
    rank, world = g.rank(), g.size()
    name = ops.normalize_op(op, "textbook.reduce_scatter")
    ops.check_dtype(output, name, "textbook.reduce_scatter")
    if len(input_list) != world or any(t.numel() != output.numel() for t in input_list):
        raise ValueError(
            f"textbook.reduce_scatter: expected {world} inputs of {output.numel()} elements "
            f"(one per rank, each like output), got sizes {[t.numel() for t in input_list]}"
        )
    rows = torch.stack([t.reshape(-1) for t in input_list])  # (world, numel) rank-local copy
    incoming = torch.empty_like(rows[0])  # (numel,)
    for step in range(world - 1):  # step s: send row r+1+s, receive row r+2+s and add mine
        send_c, recv_c = (rank + 1 + step) % world, (rank + 2 + step) % world
        _exchange(rows[send_c], incoming, g)
        ops.combine(name, rows[recv_c], incoming)
    ops.finish(name, rows[rank], world)
    output.copy_(rows[rank].view(output.shape))
    return output


@torch.no_grad()
def broadcast(tensor: torch.Tensor, src: int = 0, group=None) -> torch.Tensor:
    """Copy ``tensor`` from rank ``src`` to every rank, in place; returns it.

    A binomial tree: in round k every rank that already has the data sends it 2**k ranks
    further on, so the number of ranks holding it doubles each round: ceil(log2(world))
    rounds instead of the root sending world-1 messages itself (what
    ``minidp.comm.broadcast`` does: simplest, and fine for the once-per-run DDP broadcast).
    """
    g = groups.resolve(group)
    rank, world = g.rank(), g.size()
    if not isinstance(src, int) or not 0 <= src < world:
        raise ValueError(f"textbook.broadcast: src must be a rank in [0, {world - 1}], got {src!r}")
    flat = tensor.contiguous().view(-1)  # (numel,)
    me = (rank - src) % world  # my distance from the root: the root is 0
    reach = 1  # ranks 0 .. reach-1 (distances from the root) hold the data
    while reach < world:
        if me < reach and me + reach < world:  # I have it: pass it 'reach' ranks on
            p2p.send(flat, (rank + reach) % world, g)
        elif reach <= me < 2 * reach:  # my turn to receive, from 'reach' ranks back
            p2p.recv(flat, (rank - reach) % world, g)
        reach *= 2
    if flat.data_ptr() != tensor.data_ptr():
        tensor.copy_(flat.view(tensor.shape))
    return tensor


# What the engine adds (``minidp.comm``: ``ring.py``, ``collectives.py``, ``agree.py``):
#
# * **gloo's chunk layout and order** — ``ring.ring_all_reduce`` cuts the tensor where gloo
#   does (multiples of gloo's segment) and adds in gloo's association order, so its result
#   is bit-for-bit ``torch.distributed.all_reduce``. The ring above cuts ``world``
#   near-equal chunks (``tensor_split``), so float sums agree with gloo only to rounding.
# * **pipelined segments** — each chunk goes as several messages, each forwarded the moment
#   it is summed, so sending overlaps adding; above, a whole chunk is received before it is
#   added and passed on.
# * **windowing** — receives are posted a few segments ahead into reused buffers, so the
#   next message is already arriving while this one is added.
# * **the cross-rank agreement check** — every engine collective first checks that all
#   ranks called the same collective with the same numel, dtype and op, and raises the same
#   ``MismatchError`` on every rank. Above, mismatched calls pair up wrongly: a
#   ``CollectiveTimeout``, garbage, or — when a rank receives a longer message than its
#   buffer — gloo aborting the whole process. Only local mistakes (an unknown op, an
#   unsupported dtype, a wrong list length, src out of range) raise clear errors here.
