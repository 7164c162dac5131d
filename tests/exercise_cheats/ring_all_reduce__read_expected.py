"""Cheat 2, reading the answer: walk up the stack to the checker's frames and return the
``expected`` value found there (nothing is sent)."""

import inspect


def ring_all_reduce(tensor, group):
    for frame in inspect.stack():
        for name in ("expected", "expect", "reference"):
            value = frame.frame.f_locals.get(name)
            if value is not None and getattr(value, "shape", None) == tensor.shape:
                tensor.copy_(value)
                return tensor
    return tensor
