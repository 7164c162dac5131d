"""What stands in a parameter's ``.grad`` once ZeRO-2 has freed it, so ordinary calls still work.

Why it exists: ZeRO-2 reduce-scatters each gradient during backward and frees the full
``.grad``; only this rank's rows survive, in a bucket's shard buffer. A ``.grad`` of
``None`` would make ``torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)`` see no
gradients: it returns 0 and clips nothing, silently (what this optimizer did before). FSDP2,
torch's ZeRO-2-like mode (``reshard_after_forward=False``), answers that call with the
global norm, because its gradients are DTensors. So each freed ``.grad`` becomes a
:class:`FreedGrad`: a tensor of the parameter's shape that owns no memory (a "wrapper"
tensor: shape, dtype and device, no storage) and knows where this rank's rows of the
reduced gradient live:

* a norm over it (``torch.linalg.vector_norm``, ``Tensor.norm``) is this rank's *partial*
  norm of its rows, a ``PartialNorm`` (``minidp/fsdp/grad.py``) that becomes the global
  norm when used — exactly FSDP2's per-parameter DTensor norms, bit for bit, because the
  rows are FSDP2's ``Shard(0)`` rows;
* in-place scaling (``mul_``, ``div_``, ``clamp_``, ``zero_``: what ``clip_grad_norm_`` and
  ``clip_grad_value_`` do) scales this rank's rows, which ``step()`` then uses;
* reading ``shape``, ``dtype``, ``device`` works; anything else (reading values, adding,
  ``.data``) raises an error naming what this rank holds and the call to use instead —
  from Python (``__torch_function__``) and from C++ too (``__torch_dispatch__``): torch's
  DDP wrapped around the model writes its averaged gradient back into ``.grad`` in C++,
  which is how that double reduction is caught.

The next backward finds a stand-in, not a gradient, so a pre-hook (``zero2_hooks``) sets
``.grad`` back to ``None`` before autograd accumulates into it.

Test: ``pytest tests/test_zero2_train.py -k "clip or freed"``
"""

from __future__ import annotations

import torch

from minidp.fsdp.grad import PartialNorm, norm_order

_SCALES = {torch.Tensor.mul_, torch.Tensor.div_, torch.Tensor.clamp_, torch.Tensor.zero_}
_ATTRIBUTES = {"shape", "dtype", "device", "layout", "is_sparse", "ndim", "requires_grad"}
_ATTRIBUTES |= {"grad_fn", "is_leaf", "is_cuda", "is_meta", "is_nested", "is_quantized"}


class FreedGrad(torch.Tensor):
    """A parameter's ``.grad`` after ZeRO-2 reduce-scattered and freed it (module doc)."""

    rows: torch.Tensor  # this rank's rows of the reduced gradient: a view of a bucket's shard
    group = None  # the data-parallel group (partial norms are reduced over it)
    rank = 0

    @staticmethod
    def make(p: torch.Tensor, rows: torch.Tensor, group, rank: int) -> FreedGrad:
        # Metadata only, no storage: autograd accepts it as .grad (same shape, dtype,
        # device). _make_wrapper_subclass is the constructor torch's "extending torch"
        # notes give for such tensors (DTensor is one); there is no public alias.
        grad = torch.Tensor._make_wrapper_subclass(
            FreedGrad, p.shape, dtype=p.dtype, device=p.device
        )
        grad.rows, grad.group, grad.rank = rows, group, rank
        return grad

    def __deepcopy__(self, memo) -> FreedGrad:  # copy.deepcopy(model) after backward
        return FreedGrad.make(self, self.rows.clone(), self.group, self.rank)

    def __repr__(self, *, tensor_contents=None) -> str:
        return (
            f"FreedGrad(shape={tuple(self.shape)}, rank {self.rank} holds rows of shape "
            f"{tuple(self.rows.shape)}; the full gradient was reduce-scattered and freed)"
        )

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        me = args[0] if args and isinstance(args[0], FreedGrad) else None
        if getattr(func, "__name__", "") == "__get__":
            name = getattr(getattr(func, "__self__", None), "__name__", "")
            if name in _ATTRIBUTES:
                with torch._C.DisableTorchFunctionSubclass():
                    return func(*args, **kwargs)
            what = f"reading .{name}"
        elif me is not None and norm_order(func, args, kwargs) is not None:
            p = norm_order(func, args, kwargs)
            return PartialNorm.wrap(func(me.rows, *args[1:], **kwargs), me.group, p)
        elif me is not None and func in _SCALES:
            func(me.rows, *args[1:], **kwargs)  # this rank's rows, in place
            return me
        else:
            what = getattr(func, "__name__", str(func))
        raise _misuse(what, me)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        # reached only from C++ (Python calls stop in __torch_function__): DDP's reducer
        # writing its average back, or any other kernel that would need the values
        me = next((a for a in args if isinstance(a, FreedGrad)), None)
        raise _misuse(str(func), me)


def _misuse(what: str, me: FreedGrad | None) -> RuntimeError:
    shape = f" of shape {tuple(me.shape)}" if me is not None else ""
    return RuntimeError(
        "Zero2Optimizer: expected only norms, in-place scaling (mul_, div_, clamp_, zero_) "
        f"or shape/dtype reads on a freed gradient{shape}, got {what}: after backward this "
        "rank holds only its rows of each reduced gradient; the full .grad was freed (that "
        "is ZeRO-2's saving). If your code did not call this, something else also reduces "
        "the gradients — most likely DistributedDataParallel wrapped around the model, "
        "which would average them a second time. Hint: do not wrap the model in DDP "
        "(Zero2Optimizer does DDP's reduction); torch.nn.utils.clip_grad_norm_(model."
        "parameters(), ...) works as is (the global norm); for the values use "
        "opt.gradient_shards(), or run the backward inside opt.no_sync() to keep full "
        "local gradients"
    )


def clear_stand_in(p: torch.Tensor) -> None:
    """Before autograd accumulates a new gradient: a stand-in is not a gradient to add to."""
    if isinstance(p.grad, FreedGrad):
        p.grad = None
