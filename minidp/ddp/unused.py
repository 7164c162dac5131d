"""Which parameters did this forward use? Walk the autograd graph from the outputs.

A parameter the forward did not touch gets no gradient, so its bucket would wait forever.
With ``find_unused_parameters=True`` (opt-in: a walk per forward) the parameters of no
reachable ``AccumulateGrad`` node are ready at once, their slots zero.

Test: ``pytest tests/test_ddp.py -k unused``
"""

from __future__ import annotations

import dataclasses

import torch


def find_tensors(obj) -> list[torch.Tensor]:
    """Every tensor inside a forward's output (tensor, list, tuple, dict, dataclass)."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for item in obj for t in find_tensors(item)]
    if isinstance(obj, dict):
        return [t for item in obj.values() for t in find_tensors(item)]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return [t for f in dataclasses.fields(obj) for t in find_tensors(getattr(obj, f.name))]
    return []


def unused_parameters(outputs, params: list[torch.Tensor]) -> list[int]:
    """Indices of ``params`` that no output's autograd graph reaches, ascending."""
    index = {id(p): i for i, p in enumerate(params)}
    used: set[int] = set()
    stack = []
    for t in find_tensors(outputs):
        if t.grad_fn is not None:
            stack.append(t.grad_fn)
        elif id(t) in index:  # the output *is* a parameter
            used.add(index[id(t)])
    seen = set()  # holding the nodes keeps their Python wrappers (and ids) alive
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        variable = getattr(node, "variable", None)  # only AccumulateGrad nodes have one
        if variable is not None and id(variable) in index:
            used.add(index[id(variable)])
        for child, _ in node.next_functions:
            if child is not None and child not in seen:
                stack.append(child)
    return [i for i in range(len(params)) if i not in used]
