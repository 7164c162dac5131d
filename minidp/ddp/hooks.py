"""Communication hooks: replace "average this bucket" with your own algorithm.

A hook is ``hook(state, bucket) -> torch.futures.Future[Tensor]``, registered with
``ddp.register_comm_hook(state, hook)``, exactly torch's signature. ``bucket`` is a
:class:`GradBucket`; the future's value is the reduced flat buffer (same numel), which
DDP then writes into the parameters' ``.grad``.

Differences from torch, and why:

* the hook runs on DDP's communication thread, in bucket order (torch calls it on the
  autograd thread and expects it to start *asynchronous* work). minidp collectives
  block, so running the hook where blocking is harmless keeps hooks plain code; an
  already-completed Future is a fine return value (:func:`all_reduce_future`).
* ``state=None`` means DDP's own group (the comm thread runs inside ``use_group``).

With a hook, DDP copies gradients into the bucket *without* the ``1/world_size`` factor:
averaging is the hook's job (``allreduce_hook`` divides the buffer before the sum, as
torch's does — ``x / n`` then, not ``x * (1/n)``, which is why the bits still match).

Try: ``python -m minidp demo ddp``; test: ``pytest tests/test_ddp.py -k hook``
"""

from __future__ import annotations

import torch

from minidp.comm import all_reduce
from minidp.comm import group as groups


class GradBucket:
    """What a comm hook sees of one bucket: the flat buffer and which gradients it holds."""

    def __init__(self, index: int, num_buckets: int, buffer: torch.Tensor, bucket) -> None:
        self._index = index
        self._num_buckets = num_buckets
        self._buffer = buffer  # (numel,) rank-local, the bucket's own flat gradients
        self._bucket = bucket

    def buffer(self) -> torch.Tensor:
        """The flat ``(numel,)`` gradient buffer (a hook may change it in place)."""
        return self._buffer

    def set_buffer(self, buffer: torch.Tensor) -> None:
        """Point this object at another flat tensor (e.g. a compressed copy)."""
        self._buffer = buffer

    def index(self) -> int:
        """Position in launch order (0 = the last layers' gradients)."""
        return self._index

    def is_last(self) -> bool:
        """True for the last bucket of the iteration (a good moment for per-step work)."""
        return self._index == self._num_buckets - 1

    def parameters(self) -> list[torch.Tensor]:
        """The parameters whose gradients are in this bucket, in buffer order."""
        return list(self._bucket.params)

    def gradients(self) -> list[torch.Tensor]:
        """Per parameter, a view of ``buffer()`` shaped like the parameter."""
        return [
            self._buffer.narrow(0, off, p.numel()).view(p.shape)
            for p, off in zip(self._bucket.params, self._bucket.offsets)
        ]


def all_reduce_future(tensor: torch.Tensor, group=None) -> torch.futures.Future:
    """Sum ``tensor`` over the group in place (``minidp.comm.all_reduce``: one exchange up to
    256 KiB, else the ring); return a completed Future."""
    all_reduce(tensor, "sum", group)
    fut: torch.futures.Future = torch.futures.Future()
    fut.set_result(tensor)
    return fut


def allreduce_hook(process_group, bucket: GradBucket) -> torch.futures.Future:
    """Average the bucket: divide by the world size, then sum (what DDP does without a hook)."""
    group = groups.resolve(process_group)
    buffer = bucket.buffer()
    buffer.div_(group.size())  # divide first: the sum of n averages cannot overflow fp16
    return all_reduce_future(buffer, group)


def _compress_hook(dtype: torch.dtype, process_group, bucket: GradBucket):
    group = groups.resolve(process_group)
    buffer = bucket.buffer()
    compressed = buffer.to(dtype).div_(group.size())  # (numel,) half the bytes on the wire

    def decompress(fut: torch.futures.Future) -> torch.Tensor:
        buffer.copy_(fut.value())  # back to the bucket's dtype, in place (no extra memory)
        return buffer

    return all_reduce_future(compressed, group).then(decompress)


def fp16_compress_hook(process_group, bucket: GradBucket) -> torch.futures.Future:
    """Cast the bucket to float16, divide by the world size, all-reduce, cast back.

    Half the bytes per all-reduce; the price is float16 rounding of each gradient and of
    every partial sum (about 3 decimal digits).
    """
    return _compress_hook(torch.float16, process_group, bucket)


def bf16_compress_hook(process_group, bucket: GradBucket) -> torch.futures.Future:
    """Like :func:`fp16_compress_hook` with bfloat16 (float32's range, 2-3 digits)."""
    return _compress_hook(torch.bfloat16, process_group, bucket)
