"""Record FSDP (and HSDP) steps for real: units gathered, computed, freed, prefetched.

    python -m minidp diagrams --only fsdp
    python -m minidp classroom --no-serve --only fsdp,hsdp --out /tmp/cls

Rank processes (prefetch is about time); each hidden ``Linear`` its own ``fully_shard`` unit,
the root keeping the last layer (``last=True``: a unit too). The last step is recorded
(step 0 taught the root its prefetch order), every step leaves an ``fsdp step`` span. The
library emits ``issue all-gather``, ``all-gather``, ``forward``/``backward`` per unit and
``reduce-scatter``; :func:`observe` wraps each unit's own ``gather``/``free``/
``take_grads``/``reduce`` to note what they allocate or release — ``unit gather start``
(the ``(world, T)`` all-gather buffer), ``unit gathered`` (the full parameters), ``unit
freed``, ``unit grads`` (the full gradients), ``unit reduce start`` (the reduce-scatter's
input), ``unit reduced`` — each the *full* unit's bytes; ``fsdp shards`` is what the rank
keeps, its ``to_local()`` bytes (a DTensor's own ``nbytes`` is the global tensor's).

HSDP (:func:`hsdp_events`): the same MLP on an R x S mesh of rank processes, row r playing
node r (its S ranks shard it), each column holding one shard on every node. Two observers
that change nothing: the mesh's groups note every message they send (``hsdp send``: group,
global peer, bytes, header or data — lesson 37's trick), and each unit's ``gather``/
``reduce`` say which collective those belong to (a ``reduce`` is the row's reduce-scatter,
then the column's all-reduce: the group tells them apart). The library's spans are renamed
``hsdp ...`` so that the FSDP scene does not take them for its own.

Test: ``pytest tests/test_classroom.py tests/test_classroom_browser_shard.py``
"""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
from torch import nn

from minidp import trace
from minidp.comm.headers import HEADER_TAG
from minidp.tools.recorder import LANE, instant, mlp, own


def observe(unit, rank: int, prefix: str = "unit", **tags) -> None:
    """Wrap ``unit.gather``/``free``/``take_grads``/``reduce`` (this instance only) to note
    the bytes each call allocates or releases."""
    from minidp.fsdp.shard import shard_rows  # the engine's padding rule: rows per rank

    size = unit.param_dtype.itemsize
    full = sum(s.numel() * size for s in unit.shapes)  # the whole unit (global shapes)
    buffer = unit.world * sum(p.numel() for p in unit.padded) * size  # (world, T): every rank's
    gather, free, take, reduce = unit.gather, unit.free, unit.take_grads, unit.reduce

    def note(what: str, **args) -> None:
        trace.instant(f"{prefix} {what}", lane=LANE, rank=rank, unit=unit.label, **args, **tags)

    def gathered() -> None:
        note("gather start", buffer=buffer)
        gather()
        note("gathered", bytes=full, buffer=buffer)

    def freed() -> None:
        free()
        note("freed", bytes=full)

    def taken() -> list:
        grads = take()  # full-size gradients, plain tensors: their numel is the unit's
        note("grads", bytes=sum(g.nbytes for g in grads))
        return grads

    def reduced(grads):
        rows = sum(shard_rows(g.shape[0], unit.world) * g[0].numel() for g in grads)
        note("reduce start", buffer=unit.world * rows * grads[0].element_size())
        out = reduce(grads)
        note("reduced")
        return out

    unit.gather, unit.free, unit.take_grads, unit.reduce = gathered, freed, taken, reduced


def shard_model(model: nn.Module, fully_shard, last: bool = False, **options) -> nn.Module:
    """Each hidden ``Linear`` its own unit (the last one too if ``last``), then the root:
    minidp's ``fully_shard`` or FSDP2's, with their ``options``; returns the root."""
    for layer in model if last else model[:-1]:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, **options)
    return fully_shard(model, **options)


def _fsdp_rank(rank: int, world: int, sizes, o: dict) -> list[dict]:
    from minidp.fsdp import fully_shard
    from minidp.fsdp.wrap import unit_of

    if o["threads"]:
        torch.set_num_threads(o["threads"])
    model = mlp(*sizes, act=o["act"])
    shard_model(model, fully_shard, last=o["last"])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    units = [u for m in model.modules() if (u := unit_of(m)) is not None and u.shapes]
    g = torch.Generator().manual_seed(rank)
    events = []
    for step in range(o["steps"]):
        x = torch.randn(o["batch"], sizes[0], generator=g)
        y = torch.randn(o["batch"], sizes[-1], generator=g)
        recorded = step == o["steps"] - 1
        if recorded:
            for u in units:
                observe(u, rank)
        t0 = trace.now_us()
        with trace.recording() if recorded else contextlib.nullcontext() as rec:
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        events.append({"name": "fsdp step", "ph": "X", "ts": t0, "dur": trace.now_us() - t0,
                       "pid": rank, "tid": LANE, "args": {"step": step}})  # fmt: skip
    mine = own(rec.events, rank)
    # this rank's rows (a DTensor's to_local()), not the DTensors' global size
    params = model.parameters()
    shards = sum((w.to_local() if hasattr(w, "to_local") else w).nbytes for w in params)
    mine.append(instant("fsdp shards", min(e["ts"] for e in mine), rank, bytes=shards,
                        world=world))  # fmt: skip
    return mine + events


def fsdp_events(world, sizes: tuple, *, steps: int = 2, batch: int = 16, last: bool = False,
                act=nn.ReLU, threads: int = 0) -> list[dict]:  # fmt: skip
    """FSDP on ``world`` (a ProcessWorld) over ``mlp(*sizes)``: ``steps`` steps, the last
    one recorded."""
    o = {"steps": steps, "batch": batch, "last": last, "act": act, "threads": threads}
    return [e for r in world.run(_fsdp_rank, sizes, o, timeout=300.0) for e in r]


# ---- HSDP: shard within a node, all-reduce the shard across nodes ------------------------

NAMES = ("replicate", "shard")  # FSDP2's order: mesh[r] is node r's row


class _Collective:
    """Which collective this rank's communication thread is running (set by the wrappers)."""

    def __init__(self) -> None:
        self.calls = 0  # collectives started in the recorded step, in order (same on all ranks)
        self.now: dict | None = None
        self.phase = "forward"  # set by the rank's main thread: "forward" or "backward"

    def wrap(self, unit, rank: int) -> None:
        """Wrap ``unit.gather``/``unit.reduce`` (this instance) to name their messages."""
        gather, reduce = unit.gather, unit.reduce

        def named(kind: str, fn, *args):
            if not trace.active:
                return fn(*args)
            self.calls += 1
            self.now = {"call": self.calls, "kind": kind, "unit": unit.label, "phase": self.phase}
            try:
                return fn(*args)
            finally:
                self.now = None

        unit.gather = lambda: named("gather", gather)
        unit.reduce = lambda grads: named("reduce", reduce, grads)


class _Link:
    """A mesh group that notes every message it sends, then sends it unchanged."""

    def __init__(self, group, dim: str, rank: int, collective: _Collective) -> None:
        self._group, self._dim, self._rank, self._collective = group, dim, rank, collective
        self._global = dist.get_process_group_ranks(group)  # group rank -> global rank

    def rank(self) -> int:
        return self._group.rank()

    def size(self) -> int:
        return self._group.size()

    def send(self, tensors, dst: int, tag: int = 0):
        now = self._collective.now
        if trace.active and now is not None:
            # a unit's gather is an all-gather in the row; its reduce runs a reduce-scatter
            # in the row, then an all-reduce down the column: the group says which
            name = {"gather": "all-gather", "reduce": "reduce-scatter"}[now["kind"]]
            name = "all-reduce" if self._dim == "replicate" else name
            t = tensors[0]  # a plain message buffer: its bytes are what travels
            trace.instant("hsdp send", lane=LANE, rank=self._rank, call=now["call"],
                          collective=name, unit=now["unit"], group=self._dim,
                          to=self._global[dst], bytes=t.numel() * t.element_size(),
                          phase=now["phase"], header=tag >= HEADER_TAG)  # fmt: skip
        return self._group.send(tensors, dst, tag)

    def __getattr__(self, name: str):  # recv and the rest: the real group's
        return getattr(self._group, name)


def _hsdp_rank(rank: int, world: int, shape: tuple[int, int], width: int) -> list[dict]:
    import minidp
    from minidp.comm.mesh import DeviceMesh
    from minidp.fsdp.wrap import unit_of

    mesh = minidp.init_device_mesh("cpu", shape, mesh_dim_names=NAMES)
    collective = _Collective()
    observed = DeviceMesh(mesh.mesh, NAMES, [
        _Link(mesh.get_group(d), d, rank, collective) for d in NAMES])  # fmt: skip
    model = mlp(width, width, width, width, 4)
    shard_model(model, minidp.fully_shard, mesh=observed)  # as the FSDP scene: same units
    units = [u for m in model.modules() if (u := unit_of(m)) is not None]
    for u in units:
        collective.wrap(u, rank)
    g = torch.Generator().manual_seed(100 + rank)  # every rank its own data
    # No optimizer: the scene is the step's communication, and a torch optimizer's first
    # construction imports torch._dynamo (seconds, in every fresh rank process).
    for step in range(2):
        x, y = torch.randn(16, width, generator=g), torch.randn(16, 4, generator=g)
        model.zero_grad(set_to_none=True)
        if step == 1:
            with trace.recording() as rec:
                collective.phase = "forward"
                loss = nn.functional.mse_loss(model(x), y)
                collective.phase = "backward"  # every forward collective has been waited for
                loss.backward()
        else:
            nn.functional.mse_loss(model(x), y).backward()
    # This process recorded only its own events: each goes on this rank's track (the
    # library's own events already do, ``identity.track_rank``; ours are stamped here).
    mine = [
        {**e, "pid": rank, "name": e["name"] if e["name"] == "hsdp send" else f"hsdp {e['name']}"}
        for e in rec.events
        if e["name"] not in ("send", "recv")  # ours say more: the group, the global peer
    ]
    start = min(e["ts"] for e in mine)
    info = {"mesh": mesh.mesh.tolist(), "dims": list(NAMES),
            "shard": dist.get_process_group_ranks(mesh.get_group("shard")),
            "replicate": dist.get_process_group_ranks(mesh.get_group("replicate"))}  # fmt: skip
    mine.append(instant("hsdp mesh", start, rank, **info))
    for u in units:  # what a unit gathers (full) and what this rank keeps of it (shard)
        size = u.param_dtype.itemsize
        full = sum(s.numel() * size for s in u.shapes)
        shard = u.flat_shards(u.param_dtype).numel() * size  # padded: what it all-gathers
        mine.append(instant("hsdp unit", start, rank, unit=u.label, full=full, shard=shard))
    return mine


def check_shape(shape: tuple[int, int]) -> None:
    r, s = shape
    if r < 2 or s < 2 or r * s > 8:
        raise ValueError(
            f"hsdp: expected --hsdp-mesh RxS with R >= 2 nodes, S >= 2 ranks per "
            f"node and at most 8 ranks (one process each), got {r}x{s}. Hint: 2x2"
        )


def hsdp_events(world, shape: tuple[int, int] = (2, 2), width: int = 64) -> list[dict]:
    """One traced HSDP step (after a first, untraced one) on ``world``, a
    ``minidp.launch.ProcessWorld`` of R x S rank processes."""
    check_shape(shape)
    ranks = shape[0] * shape[1]
    if world.world_size != ranks:
        raise ValueError(
            f"hsdp: expected a world of {ranks} ranks for the {shape[0]}x{shape[1]} "
            f"mesh, got {world.world_size}. Hint: ProcessWorld({ranks})"
        )
    results = world.run(_hsdp_rank, tuple(shape), width, timeout=120.0)
    return [e for r in results for e in r]
