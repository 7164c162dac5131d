"""Cheat 4, swapping code, not names: the checker's comparison keeps its name but runs
other code (``compare.__code__`` says "no difference" whatever it is given)."""

from minidp.tools.exercise import spec


def _no_difference(got, expected, tol, labels=None):
    return None


spec.compare.__code__ = _no_difference.__code__


def ring_all_reduce(tensor, group):
    return tensor
