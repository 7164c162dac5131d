"""Communication hooks: replace "average this bucket" with your own algorithm.

torch's ``ddp.register_comm_hook(state, hook)``, ``hook(state, bucket) -> Future[Tensor]``
(the reduced flat buffer); gradients then come unscaled and the hook averages
(``allreduce_hook`` divides first, as torch's, so the bits match). Unlike torch's, hooks
run on DDP's comm thread, where minidp's blocking collectives are harmless, so a completed
Future will do (:func:`all_reduce_future`). ``state=None``: DDP's group.

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
    """Sum ``tensor`` over the group in place (``minidp.comm.all_reduce``); a completed Future."""
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
    """Cast to float16, divide by the world size, all-reduce, cast back: half the bytes, at
    the price of float16 rounding (about 3 digits) of each gradient and partial sum."""
    return _compress_hook(torch.float16, process_group, bucket)


def bf16_compress_hook(process_group, bucket: GradBucket) -> torch.futures.Future:
    """Like :func:`fp16_compress_hook` with bfloat16 (float32's range, 2-3 digits)."""
    return _compress_hook(torch.bfloat16, process_group, bucket)
