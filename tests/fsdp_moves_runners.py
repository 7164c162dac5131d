"""Rank-side runners for ``tests/test_fsdp_moves.py`` (no tests here): FSDP2 and minidp side by
side on the moves torch's own FSDP2 tests make — shard placements, one unit for several
modules, forwards that skip a module, units a backward never reaches, recovery after an
exception, chained roots, ``torch.compile``.

Every scenario builds the same seeded model twice, wraps it with FSDP2's ``fully_shard`` (a
CPU mesh over gloo) and with minidp's the same way, runs the same loop on both and returns
``(step, tensor, what, max |diff|)`` rows (``fsdp_scenarios._compare``'s: 0.0 = bit for
bit) and any values to compare. ``run(rank, world, names)`` runs several in one launch.
"""

from __future__ import annotations

import copy
import functools

import torch
import torch.nn as nn
from test_fsdp_support import diff

import minidp

SCENARIOS: dict = {}


def scenario(fn):
    SCENARIOS[fn.__name__] = fn
    return fn


def run(rank: int, world: int, names: list[str]) -> dict:
    """{name: result or ("error", text)}: one failing scenario does not hide the others."""
    import fsdp_policy_runners  # noqa: F401 - registers part 2's scenarios

    out = {}
    for name in names:
        try:
            out[name] = SCENARIOS[name](rank, world)
        except Exception as exc:  # noqa: BLE001 - reported to the test, which fails on it
            out[name] = ("error", f"{type(exc).__name__}: {exc}")
    return out


def both(build, shard, world: int):
    """(FSDP2's model, minidp's): ``build()`` twice from one seed, ``shard(model, fs)``
    with FSDP2's ``fully_shard`` (on a CPU mesh) and with minidp's."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    theirs = build()
    ours = copy.deepcopy(theirs)
    shard(theirs, functools.partial(fully_shard, mesh=init_device_mesh("cpu", (world,))))
    shard(ours, minidp.fully_shard)
    return theirs, ours


def compare(step: int, theirs: nn.Module, ours: nn.Module) -> list[tuple]:
    """Per parameter: the full tensor, this rank's shard, its gradient (0.0: equal bits)."""
    rows, mine = [], dict(ours.named_parameters())
    for n, p in theirs.named_parameters():
        q = mine.get(n)
        if q is None:
            rows.append((step, n, "missing", float("inf")))
            continue
        rows.append((step, n, "full", diff(_full(q), _full(p))))
        rows.append((step, n, "shard", diff(_local(q.detach()), _local(p.detach()))))
        rows.append((step, n, "grad", diff(_local(q.grad), _local(p.grad))))
        rows.append((step, n, "placements", 0.0 if _place(p) == _place(q) else float("inf")))
    return rows


def _full(t):
    return t.full_tensor().detach() if hasattr(t, "full_tensor") else t.detach()


def _local(t):
    return t.to_local() if hasattr(t, "to_local") else t


def _place(t):
    return tuple(map(str, getattr(t, "placements", ())))


def train(theirs, ours, step_fn, steps: int, lr: float = 1e-2) -> list[tuple]:
    """``step_fn(model, i)`` (forward + backward, returns the loss) on both, Adam steps;
    the losses' and ``compare``'s rows after each backward."""
    opts = [torch.optim.Adam(m.parameters(), lr=lr) for m in (theirs, ours)]
    rows = []
    for i in range(steps):
        losses = [step_fn(m, i).detach() for m in (theirs, ours)]
        rows.append((i, "loss", "loss", diff(losses[1], losses[0])))
        rows += compare(i, theirs, ours)
        for opt in opts:
            opt.step()
            opt.zero_grad(set_to_none=(i % 2 == 0))
    return rows


def data(rank: int, i: int, *shape, vocab: int | None = None):
    g = torch.Generator().manual_seed(1000 * rank + i)
    if vocab is not None:
        return torch.randint(0, vocab, shape, generator=g)
    return torch.randn(shape, generator=g)


# ---- shard placements -------------------------------------------------------------------
def _largest_dim(p):
    from torch.distributed.tensor import Shard

    return Shard(max(range(p.ndim), key=lambda d: p.shape[d]))


@scenario
def shard_largest_dim(rank, world):
    """torch's test_train_parity_single_group_shard_largest_dim: (32, 16) and (16, 8)."""

    def build():
        return nn.Sequential(nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 8))

    theirs, ours = both(build, lambda m, fs: fs(m, shard_placement_fn=_largest_dim), world)
    return train(theirs, ours, lambda m, i: _backward(m(data(rank, i, 4, 32))), 3)


@scenario
def shard_last_dim_per_block(rank, world):
    """Blocks on Shard(-1) (normalised to the last dim), the root on dim 0, a tied head."""
    from test_fsdp_support import TinyLM, loss_fn

    def shard(m, fs):
        from torch.distributed.tensor import Shard

        for block in m.blocks:
            fs(block, shard_placement_fn=lambda p: Shard(-1))
        fs(m)

    theirs, ours = both(lambda: TinyLM(vocab=13, dim=10), shard, world)

    def step(m, i):
        tokens, target = data(rank, i, 4, 5, vocab=13), data(rank, 50 + i, 4, 5, vocab=13)
        return _backward(loss_fn(m, tokens, target))

    return train(theirs, ours, step, 3)


def _backward(loss):
    loss = loss.sum() if loss.dim() else loss
    loss.backward()
    return loss


# ---- one unit for several modules; forwards that skip one -------------------------------
class Chunked(nn.Module):
    """torch's ChunkedHeadModel: embed, body, norm, head (optionally tied to embed)."""

    def __init__(self, dim=32, vocab=128, tie=False):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.body = nn.Linear(dim, dim, bias=False)
        self.norm = nn.RMSNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        if tie:
            self.head.weight = self.embed.weight

    def forward(self, tokens, skip_head=False):
        h = self.norm(self.body(self.embed(tokens)))
        return h if skip_head else self.head(h)


def _grouped(tie: bool, reshard=True):
    def shard(m, fs):
        if tie:
            fs(m.body, reshard_after_forward=reshard)
            fs([m.embed, m.norm, m.head], reshard_after_forward=reshard)
        else:
            fs(m.embed, reshard_after_forward=reshard)
            fs(m.body, reshard_after_forward=reshard)
            fs([m.norm, m.head], reshard_after_forward=reshard)
        fs(m, reshard_after_forward=reshard)

    return shard


def _chunked_step(rank, chunks=4, accumulate=False):
    """Chunked loss: the forward skips the head, the head runs per chunk (a backward each),
    then the body's backward; ``accumulate``: two micro-batches, the first without sync."""

    def step(m, i):
        total = 0.0
        micro = (0, 1) if accumulate else (0,)
        for k in micro:
            last = k == micro[-1]
            if accumulate:
                m.set_requires_gradient_sync(last)
                m.set_is_last_backward(last)
            h = m(data(rank, 10 * i + k, 2, 16, vocab=128), skip_head=True)
            grads = []
            for chunk in torch.chunk(h.detach(), chunks, dim=1):
                chunk = chunk.contiguous().requires_grad_(True)
                loss = m.head(chunk).sum()
                loss.backward()
                total = total + loss.detach()
                grads.append(chunk.grad)
            h.backward(torch.cat(grads, dim=1))
        return total

    return step


@scenario
def grouped_chunked_head(rank, world):
    rows = []
    for tie in (False, True):
        theirs, ours = both(lambda t=tie: Chunked(tie=t), _grouped(tie), world)
        rows += [(f"tie={tie}", *r) for r in train(theirs, ours, _chunked_step(rank), 3)]
    return rows


@scenario
def negative_control(rank, world):
    """A wrong minidp side (its last chunk's backward skipped): the rows must show it."""
    theirs, ours = both(Chunked, _grouped(False), world)
    right = _chunked_step(rank)

    def step(m, i):
        if m is theirs:
            return right(m, i)
        h = m(data(rank, 10 * i, 2, 16, vocab=128), skip_head=True)
        grads = []
        for k, chunk in enumerate(torch.chunk(h.detach(), 4, dim=1)):
            chunk = chunk.contiguous().requires_grad_(True)
            if k < 3:
                m.head(chunk).sum().backward()
            grads.append(chunk.grad if k < 3 else torch.zeros_like(chunk))
        h.backward(torch.cat(grads, dim=1))
        return h.detach().sum()

    return train(theirs, ours, step, 1)


@scenario
def grouped_chunked_accumulate(rank, world):
    theirs, ours = both(Chunked, _grouped(False, reshard=False), world)
    return train(theirs, ours, _chunked_step(rank, chunks=2, accumulate=True), 2)


@scenario
def double_partial_forward(rank, world):
    """Two forwards that skip the head, one backward: the head's gradient stays None."""
    theirs, ours = both(Chunked, _grouped(False), world)

    def step(m, i):
        h1 = m(data(rank, i, 2, 16, vocab=128), skip_head=True)
        h2 = m(data(rank, 9 + i, 2, 16, vocab=128), skip_head=True)
        return _backward(h1.sum() + h2.sum())

    rows = train(theirs, ours, step, 2)
    return {"rows": rows, "head grad": [m.head.weight.grad is None for m in (theirs, ours)]}


@scenario
def non_root_forward_backward(rank, world):
    """torch's test_non_root_forward_backward: a step through the root, then one through
    its first block alone (the other units take no part: their gradients stay None)."""
    from test_fsdp_support import Block

    def shard(m, fs):
        for b in m:
            fs(b)
        fs(m)

    theirs, ours = both(lambda: nn.Sequential(*(Block(8) for _ in range(3))), shard, world)

    def step(m, i):
        x = data(rank, i, 4, 8)
        return _backward(m(x) if i % 2 == 0 else m[0](x))

    return train(theirs, ours, step, 4)


@scenario
def unused_parameters(rank, world):
    """A Linear the forward never calls, in the root's unit and as a unit of its own."""
    from test_fsdp_support import Block

    def build():
        m = nn.Sequential(Block(8), Block(8))
        m.extra, m[1].unused = nn.Linear(8, 8), nn.Linear(8, 2)
        return m

    def shard(m, fs):
        fs(m[1].unused)
        fs(m[0])
        fs(m)

    theirs, ours = both(build, shard, world)
    return train(theirs, ours, lambda m, i: _backward(m(data(rank, i, 4, 8))), 3)


@scenario
def reset_after_exception(rank, world):
    """torch's test_reset_iter_state_after_exception: the body raises mid-forward, the
    root's reset_iter_state(), then training goes on as on FSDP2."""

    class Raiser(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner, self.armed = inner, False

        def forward(self, x):
            if self.armed:
                raise RuntimeError("boom")
            return self.inner(x)

    def build():
        m = Chunked()
        m.body = Raiser(m.body)
        return m

    def shard(m, fs):
        fs([m.norm, m.head])
        fs(m)

    theirs, ours = both(build, shard, world)
    caught = []
    for m in (theirs, ours):
        m.body.armed = True
        try:
            m(data(rank, 0, 2, 16, vocab=128), skip_head=True)
        except RuntimeError as exc:
            caught.append(str(exc))
        m.body.armed = False
        m.reset_iter_state()
    rows = train(theirs, ours, lambda m, i: _backward(m(data(rank, i, 2, 16, vocab=128))), 2)
    return {"rows": rows, "caught": caught}


@scenario
def reshard_toggle(rank, world):
    """torchtitan's chunked loss: the head group kept gathered through the chunk loop
    (set_reshard_after_forward/backward(False)), then resharded by hand; gathered or not
    read through fully_shard.state(...) on both."""
    from torch.distributed.fsdp import fully_shard as torch_fully_shard

    theirs, ours = both(Chunked, _grouped(False, reshard=False), world)
    seen = {id(theirs): [], id(ours): []}

    def step(m, i):
        state = (torch_fully_shard if m is theirs else minidp.fully_shard).state(m.head)
        group = state._fsdp_param_group
        h = m(data(rank, i, 2, 16, vocab=128), skip_head=True)
        m.head.set_reshard_after_forward(False)
        m.head.set_reshard_after_backward(False)
        grads = []
        for chunk in torch.chunk(h.detach(), 4, dim=1):
            chunk = chunk.contiguous().requires_grad_(True)
            m.head(chunk).sum().backward()
            grads.append(chunk.grad)
            seen[id(m)].append(group.is_unsharded)
        m.head.set_reshard_after_forward(True)
        m.head.set_reshard_after_backward(True)
        m.head.reshard()
        seen[id(m)].append(group.is_unsharded)
        h.backward(torch.cat(grads, dim=1))
        return h.detach().sum()

    rows = train(theirs, ours, step, 2)
    return {"rows": rows, "gathered": [seen[id(theirs)], seen[id(ours)]]}


# ---- chained roots, a shared submodule, torch.compile ------------------------------------
@scenario
def two_roots_chained(rank, world):
    """Two models, each its own root, one loss through both: ``b(a(x))``."""
    from test_fsdp_support import Block

    def build():
        return nn.ModuleDict({"a": nn.Sequential(Block(8), Block(8)), "b": Block(8)})

    def shard(m, fs):
        for b in m["a"]:
            fs(b)
        fs(m["a"])
        fs(m["b"])

    theirs, ours = both(build, shard, world)
    return train(theirs, ours, lambda m, i: _backward(m["b"](m["a"](data(rank, i, 4, 8)))), 3)


class Twin(nn.Module):
    def __init__(self, shared):
        super().__init__()
        self.shared, self.own = shared, nn.Linear(8, 8)

    def forward(self, x):
        return self.own(torch.relu(self.shared(x)))


def _twins():
    shared = nn.Linear(8, 8)
    return nn.Sequential(Twin(shared), Twin(shared))


@scenario
def shared_submodule(rank, world):
    """One Linear used by two blocks: in the root's unit (each block's own Linear a unit),
    or a unit of its own before the blocks (then used twice per forward). Wrapping the two
    blocks with the shared Linear inside each is refused by both (``refusals``)."""

    def in_root(m, fs):
        for t in m:
            fs(t.own)
        fs(m)

    def own_unit(m, fs):
        fs(m[0].shared)
        for t in m:
            fs(t)
        fs(m)

    rows = []
    for tag, shard in (("in the root", in_root), ("its own unit", own_unit)):
        theirs, ours = both(_twins, shard, world)
        step = lambda m, i: _backward(m(data(rank, i, 4, 8)))  # noqa: E731
        rows += [(tag, *r) for r in train(theirs, ours, step, 3)]
    return rows


def _compiled(rank, world, backend: str):
    """``torch.compile(model, backend=...)`` on both: the same losses and weights."""
    from test_fsdp_support import Block

    def shard(m, fs):
        for b in m:
            fs(b)
        fs(m)

    theirs, ours = both(lambda: nn.Sequential(Block(8), Block(8)), shard, world)
    runs = {id(m): torch.compile(m, backend=backend) for m in (theirs, ours)}
    return train(theirs, ours, lambda m, i: _backward(runs[id(m)](data(rank, i, 4, 8))), 2)


@scenario
def compiled_aot_eager(rank, world):
    """dynamo traces the model (and breaks at FSDP's hooks), AOTAutograd runs it."""
    return _compiled(rank, world, "aot_eager")


@scenario
def compiled_inductor(rank, world):
    """The default backend: inductor generates and compiles C++ (minutes on 2 cores)."""
    return _compiled(rank, world, "inductor")


@scenario
def accumulation_counts(rank, world):
    """torch's test_gradient_accumulation: micro-batches without sync on all units, on the
    root only, or on some blocks, kept gathered after backward or not: the gradients, and
    how many all-gathers and reduce-scatters ran — FSDP2's counted by CommDebugMode (torch's
    collective ops), minidp's by its units' own (it has its own collectives)."""
    from test_fsdp_support import Block
    from torch.distributed.tensor.debug import CommDebugMode

    from minidp.fsdp import unit_of

    c10d = torch.ops.c10d
    rows, counts = [], {}
    cases = [(m, raf, rab) for m in ("all", "root_only", "some") for raf, rab in
             ((True, True), (False, True), (False, False)) if rab or m == "all"]  # fmt: skip
    for mode, reshard, after_backward in cases:

        def shard(m, fs, reshard=reshard):
            for b in m[1:]:
                fs(b, reshard_after_forward=reshard)
            fs(m, reshard_after_forward=reshard)

        build = lambda: nn.Sequential(nn.Linear(8, 8), *(Block(8) for _ in range(3)))  # noqa: E731
        theirs, ours = both(build, shard, world)
        seen = {"ours": [0, 0]}
        for u in {id(u): u for m in ours.modules() if (u := unit_of(m))}.values():
            for k, name in enumerate(("gather", "reduce")):
                setattr(u, name, _counting(getattr(u, name), seen["ours"], k))

        def step(m, i, mode=mode, after_backward=after_backward, theirs=theirs, seen=seen):
            total, theirs_seen = 0.0, [0, 0]
            for k in range(3):
                last = k == 2
                targets = {"all": [m], "root_only": [m], "some": list(m[1:3])}[mode]
                for t in targets:
                    t.set_requires_gradient_sync(last, recurse=mode != "root_only")
                    if not after_backward:
                        t.set_reshard_after_backward(last, recurse=mode != "root_only")
                with CommDebugMode() as comm:  # (its counts start again at each enter)
                    total = total + _backward(m(data(rank, 10 * i + k, 2, 8))).detach()
                got = comm.get_comm_counts()
                theirs_seen[0] += got[c10d._allgather_base_]
                theirs_seen[1] += got[c10d._reduce_scatter_base_]
            if m is theirs:
                seen["theirs"] = theirs_seen
            return total

        tag = f"{mode} reshard={reshard} after_backward={after_backward}"
        rows += [(tag, *r) for r in train(theirs, ours, step, 1)]
        counts[tag] = (seen["theirs"], seen["ours"])
    return {"rows": rows, "counts": counts}


def _counting(fn, tally: list, k: int):
    def counted(*args):
        tally[k] += 1
        return fn(*args)

    return counted
