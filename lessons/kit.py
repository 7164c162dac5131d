"""Helpers every lesson shares: fast mode, checks that say what they compared, rank-aware
printing, the baseline task (data + model), and starting rank processes from a script or
a notebook.

Not a lesson: ``import kit`` at the top of each ``lessons/NN_*.py``. Nothing here is part of
minidp; the lessons import minidp itself for everything they teach.

Fast mode (CI): ``MINIDP_LESSON_FAST=1 python lessons/08_ring_all_reduce.py`` shrinks sizes
and steps; every check still runs and still asserts.
"""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

import minidp
import minidp.tools.bench.verdict

FAST = os.environ.get("MINIDP_LESSON_FAST", "") not in ("", "0")
HERE = Path(__file__).resolve().parent
N_CHECKS = 0  # how many checks passed in this process (printed by done())


def why_no_fsdp2() -> str:
    """Why torch's FSDP2 cannot be compared with on a CPU (gloo) mesh here; "" if it can."""
    version = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    if version < (2, 8):
        return f"torch {torch.__version__}'s gloo has no reduce_scatter (FSDP2 needs >= 2.8)"
    if version == (2, 8):  # measured: 2.0x the average at 2 ranks; 2.11 averages
        return f"torch {torch.__version__}'s FSDP2 sums the gradients on gloo instead of averaging"
    return ""


def pick(full, fast):
    """``full`` normally, ``fast`` under MINIDP_LESSON_FAST=1."""
    return fast if FAST else full


def title(text: str) -> None:
    bar = "=" * len(text)
    mode = "  [fast mode]" if FAST else ""
    print(f"\n{bar}\n{text}{mode}\n{bar}", flush=True)


def section(text: str) -> None:
    print(f"\n--- {text} ---", flush=True)


def machine() -> str:
    """One line describing the hardware the numbers were measured on."""
    return minidp.tools.bench.verdict.machine()


# ----------------------------------------------------------------------------- checks


def _flat(x) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, dict):
        return [t for k in sorted(x) for t in _flat(x[k])]
    if isinstance(x, (list, tuple)):
        return [t for item in x for t in _flat(item)]
    if isinstance(x, nn.Module):
        return [p.detach() for p in x.parameters()]
    return [torch.as_tensor(x)]


def check(
    what: str,
    ours,
    theirs,
    exact: bool = True,
    rtol: float = 1.3e-6,
    atol: float = 1e-5,
) -> float:
    """Compare ``ours`` with ``theirs`` (tensors, lists, dicts or modules); print and assert.

    ``exact``: ``torch.equal`` on every tensor (bit for bit); otherwise
    ``torch.testing.assert_close`` with ``rtol``/``atol``. Returns the max |difference|.
    """
    global N_CHECKS
    a, b = _flat(ours), _flat(theirs)
    assert len(a) == len(b), f"{what}: {len(a)} tensors vs {len(b)}"
    for x, y in zip(a, b):
        assert x.shape == y.shape, f"{what}: shape {tuple(x.shape)} vs {tuple(y.shape)}"
    diff = max(
        ((x.double() - y.double()).abs().max().item() if x.numel() else 0.0 for x, y in zip(a, b)),
        default=0.0,
    )
    n = sum(x.numel() for x in a)
    if exact:
        same = all(torch.equal(x, y) for x, y in zip(a, b))
        verdict = "bit-for-bit equal (torch.equal)" if same else f"NOT equal, max |diff| {diff:.3g}"
        print(f"CHECK {what}: {verdict} [{len(a)} tensor(s), {n} values]", flush=True)
        assert same, f"{what}: expected bit-for-bit equality, max |diff| = {diff:.3g}"
    else:
        for x, y in zip(a, b):
            torch.testing.assert_close(x, y, rtol=rtol, atol=atol, msg=lambda m: f"{what}: {m}")
        print(
            f"CHECK {what}: close, max |diff| {diff:.3g} (allowed rtol {rtol:g}, atol {atol:g}) "
            f"[{len(a)} tensor(s), {n} values]",
            flush=True,
        )
    N_CHECKS += 1
    return diff


def check_true(what: str, condition: bool, detail: str = "") -> None:
    """A yes/no check (an error message, a count, a property), printed and asserted."""
    global N_CHECKS
    print(f"CHECK {what}: {'yes' if condition else 'NO'}{f' ({detail})' if detail else ''}")
    assert condition, f"{what}: {detail}"
    N_CHECKS += 1


def done() -> None:
    print(f"\nAll {N_CHECKS} checks passed.", flush=True)


# ----------------------------------------------------------------------------- ranks


def say(rank: int, *parts: Any) -> None:
    """Print with a rank prefix: for lines every rank prints.

    One ``write`` per line: processes sharing a terminal or pipe then never split each
    other's lines (``print`` writes its pieces separately).
    """
    sys.stdout.write(" ".join([f"[rank {rank}]", *map(str, parts)]) + "\n")
    sys.stdout.flush()


def say0(rank: int, *parts: Any) -> None:
    """Print once, from rank 0."""
    if rank == 0:
        sys.stdout.write(" ".join(map(str, parts)) + "\n")
        sys.stdout.flush()


def _lesson_file_for(fn: Callable) -> Path | None:
    """The lesson file that defines ``fn`` (for notebooks, where __main__ has no file)."""
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        source = f"def {fn.__name__}("
    hits = [p for p in sorted(HERE.glob("[0-9][0-9]_*.py")) if source in p.read_text()]
    return hits[0] if len(hits) == 1 else None


def _find_main_file(fn: Callable) -> None:
    """Rank processes find ``fn`` by importing the lesson file (``__main__``).

    A Jupyter kernel has no file, so point ``__main__.__file__`` at the lesson that defines
    ``fn``. This is why every cell that *does* something sits under
    ``if __name__ == "__main__":`` — the ranks import the file to find their function and
    must not rerun the lesson.
    """
    main = sys.modules["__main__"]
    main_file = getattr(main, "__file__", None)
    if getattr(fn, "__module__", None) == "__main__" and not (
        main_file and os.path.exists(main_file)
    ):
        path = _lesson_file_for(fn)
        if path is None:
            raise RuntimeError(
                f"kit: cannot find the lesson file defining {fn.__name__}; run the lesson "
                "as a script (python lessons/NN_name.py)"
            )
        main.__file__ = str(path)


def spawn(fn: Callable, world_size: int, *args, **kwargs) -> list:
    """``minidp.launch.spawn``, also from a notebook."""
    _find_main_file(fn)
    return minidp.launch.spawn(fn, world_size, *args, **kwargs)


def world(fn: Callable, world_size: int) -> minidp.launch.ProcessWorld:
    """A long-lived ``minidp.launch.ProcessWorld`` that will run ``fn``, also from a notebook.

    Its ranks keep their state between ``world.run(fn, ...)`` calls (a lesson's timing
    rounds reuse the same models); close it with ``world.close()``.
    """
    _find_main_file(fn)
    return minidp.launch.ProcessWorld(world_size)


# ----------------------------------------------------------------------------- baseline task

IN_FEATURES, CLASSES = 16, 4


def make_data(n: int, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """A synthetic 4-class problem: ``n`` points in 16-d, labels from a fixed random teacher."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, IN_FEATURES, generator=g)  # (n, 16)
    teacher = torch.randn(IN_FEATURES, CLASSES, generator=torch.Generator().manual_seed(1234))
    y = (x @ teacher + 0.5 * torch.randn(n, CLASSES, generator=g)).argmax(dim=1)  # (n,)
    return x, y


def make_model(seed: int = 0, width: int = 64, depth: int = 2) -> nn.Sequential:
    """The baseline MLP: ``depth`` hidden layers of ``width`` units (same seed, same weights)."""
    g = torch.Generator().manual_seed(seed)
    layers: list[nn.Module] = []
    sizes = [IN_FEATURES] + [width] * depth
    for a, b in zip(sizes, sizes[1:]):
        layers += [nn.Linear(a, b), nn.Tanh()]
    layers.append(nn.Linear(sizes[-1], CLASSES))
    model = nn.Sequential(*layers)
    with torch.no_grad():  # explicit generator: identical in every process and thread
        for p in model.parameters():
            p.copy_(torch.empty_like(p).uniform_(-1, 1, generator=g) / p.shape[-1] ** 0.5)
    return model


def batches(x: torch.Tensor, y: torch.Tensor, batch: int) -> Sequence[tuple]:
    """Consecutive batches (no shuffling, so every lesson sees the same ones)."""
    return [(x[i : i + batch], y[i : i + batch]) for i in range(0, len(x) - batch + 1, batch)]


def train_single(model: nn.Module, data: Sequence[tuple], lr: float = 0.1) -> list[float]:
    """The baseline: plain SGD on one device, one step per batch; returns the losses."""
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for xb, yb in data:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return (model(x).argmax(1) == y).float().mean().item()
