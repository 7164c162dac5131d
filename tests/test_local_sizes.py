"""Every number of bytes a rank "holds" is its own: local sizes under DTensor.

A sharded parameter (``fully_shard``'s, FSDP2's) is a DTensor: its ``numel()``,
``nbytes`` and ``shape`` describe the *global* tensor, and ``to_local()`` is this rank's
rows. A size read on one must say which it means. Two checks:

* **read from the source** (catches the next such place): in every lesson, planner and
  book file that shards, a size read (``.numel()``, ``.nbytes``, ``.element_size()``,
  ``untyped_storage().nbytes()``, ``.shape``) on a parameter or a gradient is either on
  ``to_local()`` / ``local(...)`` / ``full_tensor()``, or its statement says ``# global``
  in a comment. A mutation (lesson 32's old ``p.grad.nbytes``) is caught.
* **measured on 2 rank processes**: after a step of ``minidp.fully_shard`` and of FSDP2 on
  a model whose rows do not split evenly, every "bytes this rank holds" that the library
  (``fsdp.sharded_bytes``), the planner (``memory.measure``) and lesson 32 report equals
  the bytes of the local tensors, differs between the ranks, and is not the global size.

Run: ``pytest tests/test_local_sizes.py``
"""

from __future__ import annotations

import ast
import importlib.util
import io
import re
import tokenize
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from helpers import FSDP2_UNUSABLE
from torch import nn

import minidp
from minidp.fsdp.dtensor import local
from minidp.tools.planner.memory import measure, storage_bytes

ROOT = Path(__file__).resolve().parents[1]
# the files this check covers: the lessons (20 has its own owner: not yet), planner, book
COVERED = [
    *(p for p in sorted((ROOT / "lessons").glob("[0-9][0-9]_*.py")) if p.name[:2] != "20"),
    *sorted((ROOT / "minidp" / "tools" / "planner").glob("*.py")),
    *sorted((ROOT / "minidp" / "textbook").glob("*.py")),
]
SHARDS = re.compile(r"fully_shard|to_local|DTensor")  # where DTensors appear
SIZE_CALLS = {"numel", "nelement", "element_size"}
ITERATING = {"list", "tuple", "sorted", "reversed", "zip", "enumerate", "map", "filter", "iter"}
SAYS_WHICH = re.compile(r"to_local\(\)|\blocal\(|full_tensor\(\)")


def _paramish(expr: ast.AST, names: set[str]) -> bool:
    """Does ``expr`` hold parameters or gradients: ``m.parameters()``, ``p.grad``, a name
    bound to one, a list, comprehension or ``list(...)``/``zip(...)`` of them?"""
    if isinstance(expr, ast.Name):
        return expr.id in names
    if isinstance(expr, ast.Attribute):
        return expr.attr == "grad" or _paramish(expr.value, names)
    if isinstance(expr, ast.Subscript | ast.Starred):
        return _paramish(expr.value, names)
    if isinstance(expr, ast.Call):
        func = expr.func
        if isinstance(func, ast.Attribute):
            return func.attr in ("parameters", "named_parameters") or (
                func.attr in ("to", "detach", "clone", "view", "reshape", "flatten")
                and _paramish(func.value, names)
            )
        wraps = isinstance(func, ast.Name) and func.id in ITERATING
        return wraps and any(_paramish(a, names) for a in expr.args)
    if isinstance(expr, ast.List | ast.Tuple | ast.Set):
        return any(_paramish(e, names) for e in expr.elts)
    if isinstance(expr, ast.ListComp | ast.GeneratorExp | ast.SetComp):
        return _paramish(expr.elt, names | _param_names(expr))
    return False


def _param_names(tree: ast.AST, names: frozenset[str] = frozenset()) -> set[str]:
    """Names bound to parameters or gradients in ``tree``: loop targets over them, and
    names assigned them (to a fixed point: ``grads = [p.grad ...]; for g in grads``)."""
    names = set(names)
    while True:
        before = len(names)
        for node in ast.walk(tree):
            if isinstance(node, ast.For | ast.comprehension) and _paramish(node.iter, names):
                target = node.target.elts[-1] if isinstance(node.target, ast.Tuple) else node.target
                if isinstance(target, ast.Name):
                    names.add(target.id)
            elif isinstance(node, ast.Assign) and _paramish(node.value, names):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        if len(names) == before:
            return names


def unsaid_size_reads(source: str, name: str = "<source>") -> list[str]:
    """``"name:line: expression"`` for each size read on a parameter or gradient that says
    neither local (``to_local()``, ``local(...)``, ``full_tensor()``) nor ``# global``."""
    tree = ast.parse(source)
    comments = {
        tok.start[0]: tok.string
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    }
    params = _param_names(tree)
    statements = [n for n in ast.walk(tree) if isinstance(n, ast.stmt)]
    found = []
    for node in ast.walk(tree):
        receiver = None
        if isinstance(node, ast.Attribute) and node.attr in ("nbytes", "shape"):
            receiver = node.value
            storage = isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Attribute)
            if storage and receiver.func.attr == "untyped_storage":
                receiver = receiver.func.value
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in SIZE_CALLS
        ):
            receiver = node.func.value
        if receiver is None:
            continue
        if not _paramish(receiver, params) or SAYS_WHICH.search(ast.unparse(receiver)):
            continue
        stmt = min(
            (s for s in statements if s.lineno <= node.lineno <= s.end_lineno),
            key=lambda s: s.end_lineno - s.lineno,
        )
        lines = range(stmt.lineno, stmt.end_lineno + 1)
        if not any(re.search(r"\bglobal\b", comments.get(i, "")) for i in lines):
            found.append(f"{name}:{node.lineno}: {ast.unparse(node)}")
    return found


@pytest.mark.parametrize("path", COVERED, ids=lambda p: p.name)
def test_size_reads_on_parameters_say_local_or_global(path):
    text = path.read_text()
    if not SHARDS.search(text):
        return  # no DTensor in this file: every parameter is a plain tensor
    found = unsaid_size_reads(text, str(path.relative_to(ROOT)))
    assert not found, (
        "a size read on a parameter or gradient that may be a DTensor must say which it "
        "means: to_local() (this rank's) or a '# global' comment. Found:\n" + "\n".join(found)
    )


def test_the_source_check_catches_lesson_32s_old_global_shard_bytes():
    old = 'out["shard grad bytes"] = sum(p.grad.nbytes for p in model.parameters())\n'
    assert unsaid_size_reads(old) == ["<source>:1: p.grad.nbytes"]
    indirect = "grads = [p.grad for p in model.parameters()]\nn = sum(g.numel() for g in grads)\n"
    assert unsaid_size_reads(indirect) == ["<source>:2: g.numel()"]
    said = [
        "n = sum(p.grad.to_local().nbytes for p in model.parameters())\n",
        "n = sum(p.nbytes for p in model.parameters())  # global: the unsharded model\n",
        "n = sum(local(p.grad).numel() for p in m.parameters())\n",
    ]
    assert all(unsaid_size_reads(s) == [] for s in said)


# ---- measured on two rank processes --------------------------------------------------------


class Uneven(nn.Module):
    """Rows that do not split evenly on 2 ranks (5, 7, 3), a unit per block and the root."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(6, 5), nn.Linear(5, 7)])
        self.head = nn.Linear(7, 3)

    def forward(self, x):
        for block in self.blocks:
            x = torch.tanh(block(x))
        return self.head(x)


def _lesson(number: str):
    """A lesson module, imported (its cells that do work sit under ``__main__``)."""
    import sys

    sys.path.insert(0, str(ROOT / "lessons"))  # the lessons import their kit
    path = next((ROOT / "lessons").glob(f"{number}_*.py"))
    spec = importlib.util.spec_from_file_location(f"lesson_{number}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _local_bytes(tensors) -> int:
    return sum(local(t).nbytes for t in tensors if t is not None)


def held_bytes(rank: int, world: int) -> dict:
    """One AdamW step of each library; what each reporter says this rank holds, beside the
    local tensors' bytes and the global ones."""
    out = {}
    libraries = ["minidp"] if FSDP2_UNUSABLE else ["minidp", "fsdp2"]
    for lib in libraries:
        torch.manual_seed(0)
        model = Uneven()
        if lib == "minidp":
            shard = minidp.fully_shard
        else:
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.fsdp import fully_shard

            mesh = init_device_mesh("cpu", (world,))

            def shard(m, mesh=mesh):
                return fully_shard(m, mesh=mesh)

        for block in model.blocks:
            shard(block)
        shard(model)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        x = torch.randn(4, 6, generator=torch.Generator().manual_seed(rank))
        F.mse_loss(model(x), torch.zeros(4, 3)).backward()
        opt.step()
        params, grads = list(model.parameters()), [p.grad for p in model.parameters()]
        states = [v for s in opt.state.values() for v in s.values() if torch.is_tensor(v)]
        used = measure(model, opt)
        out[lib] = {
            "local": [_local_bytes(params), _local_bytes(grads)],
            "global": [sum(p.nbytes for p in params), sum(g.nbytes for g in grads)],  # global
            "storages": [storage_bytes(params), storage_bytes(grads), storage_bytes(states)],
            "measure": [used.params, used.grads, used.optimizer],
            "lesson 32": _lesson("32").shard_grad_bytes(model),
        }
        if lib == "minidp":
            held = minidp.fsdp.sharded_bytes(model)
            out[lib]["sharded_bytes"] = [held["params"], held["grads"]]
    return out


@pytest.fixture(scope="module")
def held(process_world):
    return process_world(2).run(held_bytes)


@pytest.mark.parametrize("lib", ["minidp", "fsdp2"])
def test_every_bytes_held_report_is_the_ranks_own(held, lib):
    if lib == "fsdp2" and FSDP2_UNUSABLE:
        pytest.skip(FSDP2_UNUSABLE)
    for rank, r in enumerate(h[lib] for h in held):
        params, grads = r["local"]
        assert r["lesson 32"] == grads, f"rank {rank}: lesson 32's shard bytes"
        assert r["measure"] == r["storages"], f"rank {rank}: the planner's measure()"
        # a storage is the padded shard: at least the local rows, less than the global
        assert params <= r["storages"][0] < r["global"][0], rank
        if lib == "minidp":  # the storages this rank holds, padding included
            assert r["sharded_bytes"] == r["storages"][:2], f"rank {rank}: fsdp.sharded_bytes"
    local = [h[lib]["local"] for h in held]
    assert local[0] != local[1], "5, 7 and 3 rows: the ranks hold different bytes"
    assert [a + b for a, b in zip(*local)] == held[0][lib]["global"], "the shards add up"
