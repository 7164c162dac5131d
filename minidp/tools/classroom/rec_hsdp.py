"""Record one HSDP step for real: shard within a node, all-reduce the shard across nodes.

    python -m minidp classroom --no-serve --only hsdp --out /tmp/cls

HSDP needs ``torch.distributed`` groups for the mesh's rows and columns
(``minidp.init_device_mesh`` calls ``dist.new_group``), so this scene runs real rank
*processes* (``minidp.launch.ProcessWorld``: 7-10 s on 2 cores, nearly all of it each
process importing torch; the step itself takes under a second), not thread-ranks like
the other scenes. On an R x S mesh, row r plays node r: its S ranks shard the model
between them; each column holds the same shard on every node.

The same MLP as the FSDP scene: each hidden ``Linear`` is an HSDP unit
(``fully_shard(layer, mesh=mesh)``), the root keeps the last layer. Step 1 runs untraced
(the root learns its prefetch order); step 2 is recorded. Two observers, nothing changed:

* the mesh handed to ``fully_shard`` holds the *same* groups, each wrapped so that every
  message it sends is noted (``hsdp send``: which group, the global rank it goes to, its
  bytes, and whether it is minidp's header check rather than data) — the lesson 37 trick,
  with ``trace`` events instead of a log;
* each unit's own ``gather``/``reduce`` are wrapped (this instance only, as ``rec_fsdp``
  does) to say which collective those messages belong to: a unit's ``reduce`` is the
  reduce-scatter in the row *and then* the all-reduce down the column (``unit.reduce``),
  told apart by the group its messages use.

The library's own spans (``all-gather unit 1``, ``forward unit 1``, ...) are kept, renamed
``hsdp all-gather unit 1`` and so on, so the FSDP scene, which reads those names, does not
take them for its own. Test: ``pytest tests/test_classroom.py tests/test_classroom_browser.py``
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from minidp import trace
from minidp.comm.headers import HEADER_TAG
from minidp.tools.classroom.rec_fsdp import mlp, shard_model

LANE = "classroom"
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
    model = mlp(width)
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
    mine.append({"name": "hsdp mesh", "ph": "i", "s": "t", "ts": start, "pid": rank,
                 "tid": LANE, "args": info})  # fmt: skip
    for u in units:  # what a unit gathers (full) and what this rank keeps of it (shard)
        size = u.param_dtype.itemsize
        full = sum(s.numel() * size for s in u.shapes)
        shard = u.flat_shards(u.param_dtype).numel() * size  # padded: what it all-gathers
        args = {"unit": u.label, "full": full, "shard": shard}
        mine.append({"name": "hsdp unit", "ph": "i", "s": "t", "ts": start, "pid": rank,
                     "tid": LANE, "args": args})  # fmt: skip
    return mine


def check_shape(shape: tuple[int, int]) -> None:
    r, s = shape
    if r < 2 or s < 2 or r * s > 8:
        raise ValueError(
            f"classroom hsdp: expected --hsdp-mesh RxS with R >= 2 nodes, S >= 2 ranks per "
            f"node and at most 8 ranks (one process each), got {r}x{s}. Hint: 2x2"
        )


def hsdp_events(world, shape: tuple[int, int] = (2, 2), width: int = 64) -> list[dict]:
    """One traced HSDP step (after a first, untraced one) on ``world``, a
    ``minidp.launch.ProcessWorld`` of R x S rank processes."""
    check_shape(shape)
    ranks = shape[0] * shape[1]
    if world.world_size != ranks:
        raise ValueError(
            f"classroom hsdp: expected a world of {ranks} ranks for the {shape[0]}x{shape[1]} "
            f"mesh, got {world.world_size}. Hint: ProcessWorld({ranks})"
        )
    results = world.run(_hsdp_rank, tuple(shape), width, timeout=120.0)
    return [e for r in results for e in r]
