"""Cheat 3, changing what equality means: the returned tensor's class becomes a subclass
whose torch.equal (and ==) always says True; nothing is summed."""

import torch


class AlwaysEqual(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (torch.equal, torch.Tensor.equal):
            return True
        if func is torch.Tensor.__eq__:
            return torch.ones_like(args[0].as_subclass(torch.Tensor), dtype=torch.bool)
        return super().__torch_function__(func, types, args, kwargs or {})


def ring_all_reduce(tensor, group):
    tensor.__class__ = AlwaysEqual
    return tensor
