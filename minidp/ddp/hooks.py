"""Communication hooks: replace "average this bucket" with your own algorithm.

torch's ``ddp.register_comm_hook(state, hook)``, ``hook(state, bucket) -> Future[Tensor]``
(the reduced flat buffer); gradients then come unscaled and the hook averages
(``allreduce_hook`` divides first, as torch's, so the bits match). Unlike torch's, hooks
run on DDP's comm thread, where minidp's blocking collectives are harmless, so a completed
Future will do (:func:`all_reduce_future`). ``state=None``: DDP's group. torch's own hooks
(``torch.distributed.algorithms.ddp_comm_hooks``: the default ones, PowerSGD) run on
minidp's DDP as they are; a bf16 hook is refused without CUDA and NCCL, as torch refuses it.

Try: ``python -m minidp demo ddp``; test: ``pytest tests/test_ddp.py -k hook
tests/test_ddp_moves.py``
"""

from __future__ import annotations

import torch
import torch.distributed as dist

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


def fp16_compress_hook(process_group, bucket: GradBucket) -> torch.futures.Future:
    """Cast to float16, divide by the world size, all-reduce, cast back: half the bytes, at
    the price of float16 rounding (about 3 digits) of each gradient and partial sum."""
    group = groups.resolve(process_group)
    buffer = bucket.buffer()
    compressed = buffer.to(torch.float16).div_(group.size())  # (numel,) half the bytes

    def decompress(fut: torch.futures.Future) -> torch.Tensor:
        buffer.copy_(fut.value())  # back to the bucket's dtype, in place (no extra memory)
        return buffer

    return all_reduce_future(compressed, group).then(decompress)


def check_hook(hook) -> None:
    """Refuse what torch's ``register_comm_hook`` refuses: not callable; a bf16 hook (by its
    name, as torch decides) without CUDA and NCCL 2.10+ (or XPU and XCCL)."""
    if not callable(hook):
        raise TypeError(
            f"Communication hook must be callable, got {hook!r}. Hint: pass the function, "
            "e.g. ddp.register_comm_hook(None, allreduce_hook)"
        )
    if getattr(hook, "__name__", "") in ("bf16_compress_hook", "bf16_compress_wrapper_hook"):
        nccl = dist.is_nccl_available() and torch.cuda.nccl.version() >= (2, 10)
        cuda = torch.version.cuda is not None or torch.version.hip is not None
        xccl = getattr(dist, "is_xccl_available", lambda: False)() and torch.xpu.is_available()
        if not ((cuda and nccl) or xccl):
            raise TypeError(
                "BF16 all reduce communication hook required CUDA 11+ and NCCL 2.10+ or XPU "
                "and XCCL. Hint: on CPU (gloo) use fp16_compress_hook, which halves the "
                "bytes too"
            )
