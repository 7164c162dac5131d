"""Exercise (lesson 22): a DDP communication hook that sends the gradients as float16.

Task: DDP calls ``hook(state, bucket)`` for every bucket of gradients, once the bucket is
full, and expects a ``torch.futures.Future`` whose value is the bucket's averaged
gradients. Write torch's ``fp16_compress_hook``: half the bytes on the wire, and exactly
torch's rounding (the checker registers it with ``ddp.register_comm_hook(group, hook)``
and compares every gradient with torch's own hook's, bit for bit):

1. ``buffer = bucket.buffer()``: the bucket's flat float32 gradients;
2. compress: cast a copy to ``torch.float16`` and divide it by the world size — in that
   order, in float16 (dividing before the sum keeps it from overflowing 65504);
3. ``fut = dist.all_reduce(compressed, group=state, async_op=True).get_future()``:
   ``state`` is the process group; the future's value is a LIST holding the sum;
4. return ``fut.then(decompress)``, where ``decompress(fut)`` copies ``fut.value()[0]``
   back into ``buffer`` (``buffer.copy_(...)`` casts back to float32, in place) and
   returns ``buffer``.

Tools: ``torch.distributed`` (as ``dist``); ``tensor.to(torch.float16)``, ``.div_(n)``,
``.copy_(src)``; ``state.size()`` is the number of ranks.

Hints:
* Keep the signature's annotations as they are and do not add
  ``from __future__ import annotations``: DDP compares the annotations themselves.
* All-reduce on ``state``, the group you are given, not the default group.
* Returning the all-reduce's own future hands DDP a list, not a tensor: chain ``.then``.

Check: ``python -m minidp exercise check fp16_compress_hook``
"""

import torch
import torch.distributed as dist


def fp16_compress_hook(
    state: dist.ProcessGroup, bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    """All-reduce ``bucket`` as float16 (divided by the world size first), back in place."""
    raise NotImplementedError("not implemented yet: to fp16, divide, all-reduce, copy back")
