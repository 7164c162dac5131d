"""Send a Python object (an optimizer's state dict) from one rank to all, over minidp's broadcast.

Two broadcasts: the pickled length (int64), then the bytes (uint8). Like
``torch.distributed.broadcast_object_list`` it unpickles what peers send: only use it
inside a job whose ranks you trust.

Test: ``pytest tests/test_zero.py -k state_dict``
"""

from __future__ import annotations

import pickle

import torch

from minidp.comm import broadcast


def broadcast_object(obj, src: int, group) -> object:
    """Return rank ``src``'s ``obj`` on every rank (``obj`` is ignored elsewhere)."""
    mine = group.rank() == src
    data = pickle.dumps(obj) if mine else b""
    size = torch.tensor([len(data)], dtype=torch.int64)
    broadcast(size, group=group, group_src=src)  # src: a rank of the group
    buf = torch.frombuffer(bytearray(data), dtype=torch.uint8) if mine else None
    if buf is None:
        buf = torch.empty(int(size), dtype=torch.uint8)
    broadcast(buf, group=group, group_src=src)
    return obj if mine else pickle.loads(buf.numpy().tobytes())
