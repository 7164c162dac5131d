"""Trace recording and Chrome-trace export: valid JSON, one track per rank, free when off.

Run: ``pytest tests/test_trace.py``
"""

from __future__ import annotations

import json

import torch

from minidp import trace
from minidp.comm import group as groups
from minidp.comm import ring_all_reduce
from minidp.launch import run_threads
from minidp.textbook import collectives as book


def _traced_ring(rank: int, world: int) -> torch.Tensor:
    x = torch.arange(8, dtype=torch.float32) + rank
    with trace.span("all_reduce", lane="compute", numel=8):
        ring_all_reduce(x)
    trace.instant("grad_ready", lane="hooks", param="w")
    return x


def _traced_ring_process(rank: int, world: int) -> list[dict]:
    with trace.recording() as rec:
        _traced_ring(rank, world)
    return rec.events


def _check_chrome(data: dict, ranks: set[int]) -> None:
    events = data["traceEvents"]
    assert {e["pid"] for e in events if e["ph"] in ("X", "i")} == ranks
    names = {(e["pid"], e["args"]["name"]) for e in events if e.get("name") == "process_name"}
    assert names == {(r, f"rank {r}") for r in ranks}
    for e in events:
        assert isinstance(e["pid"], int)
        if e["ph"] != "M" or "tid" in e:
            assert isinstance(e["tid"], int)  # Chrome/Perfetto want numbered threads
        if e["ph"] in ("X", "i", "s", "f"):
            assert e["ts"] >= 0
        if e["ph"] == "X":
            assert e["dur"] > 0
    lanes = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert {"compute", "hooks", "comm"} <= lanes


def test_thread_world_trace_has_every_rank(tmp_path):
    with trace.recording() as rec:
        out = run_threads(_traced_ring, 4)
    assert all(torch.equal(o, out[0]) for o in out)
    assert rec.ranks() == [0, 1, 2, 3]
    for r in range(4):
        sends = rec.select("send", rank=r)
        assert sends and all(e["args"]["bytes"] > 0 for e in sends)
        assert rec.select("recv", rank=r)
        assert [e["name"] for e in rec.select(rank=r, lane="hooks")] == ["grad_ready"]
    path = rec.save(tmp_path / "ring.trace.json")
    data = json.loads(path.read_text())
    _check_chrome(data, {0, 1, 2, 3})
    flows = [e for e in data["traceEvents"] if e["ph"] in ("s", "f")]
    assert flows and len(flows) % 2 == 0  # send -> recv arrows come in pairs
    assert len(trace.load(path)) == len(rec.events)


def test_process_world_trace_merges_ranks(tmp_path, process_world):
    world = process_world(2)
    per_rank = world.run(_traced_ring_process)
    path = trace.save(tmp_path / "procs.json", *per_rank)
    _check_chrome(json.loads(path.read_text()), {0, 1})


def test_off_records_nothing_and_costs_little():
    assert not trace.active
    with trace.span("x"):  # the shared do-nothing context
        pass
    trace.instant("y")
    trace.complete("z", 0.0, 1.0)
    with trace.recording() as rec:
        assert trace.active
        with trace.recording() as inner:
            trace.instant("both")
        trace.instant("outer only")
    assert not trace.active
    assert [e["name"] for e in inner.events] == ["both"]
    assert [e["name"] for e in rec.events] == ["both", "outer only"]
    assert trace.span("a") is trace.span("b")  # no allocation per call when off


def test_public_names_and_the_flag_hot_paths_read():
    # The package re-exports its submodules' names; the hot paths test ``trace.active`` on
    # the package itself, so that is the flag recording() must flip.
    from minidp.comm import p2p

    for name in ("active", "recording", "span", "instant", "complete", "now_us", "save",
                 "load", "to_chrome", "Recording", "tap", "MessageLog", "Message"):  # fmt: skip
        assert hasattr(trace, name), name
    assert p2p.trace is trace
    with trace.recording():
        assert p2p.trace.active
    assert not p2p.trace.active


def test_complete_records_a_measured_interval():
    with trace.recording() as rec:
        t0 = trace.now_us()
        trace.complete("bucket 0", t0, t0 + 250.0, lane="buckets", rank=3, bytes=64)
    (e,) = rec.events
    assert (e["pid"], e["tid"], e["dur"], e["args"]["bytes"]) == (3, "buckets", 250.0, 64)


def _tapped(rank: int, world: int, log: trace.MessageLog) -> torch.Tensor:
    x = torch.full((6,), rank + 1, dtype=torch.int64)
    book.ring_all_reduce(x, group=trace.tap(groups.resolve(), log, watch=x))
    return x


def test_tap_logs_every_message_with_its_place():
    log = trace.MessageLog()
    out = run_threads(_tapped, 3, log)
    assert all(torch.equal(o, torch.full((6,), 6, dtype=torch.int64)) for o in out)
    for r in range(3):
        data = log.sends(src=r)
        assert len(data) == 4  # 2 reduce-scatter + 2 all-gather steps, one chunk each
        assert {m.offset for m in data} <= {0, 2, 4}
        assert all(m.payload.numel() == 2 for m in data)
        assert log.bytes_sent(r, watched=True) == 4 * 2 * 8
    recvs = [m for m in log.messages if m.kind == "recv"]
    assert len(recvs) == len([m for m in log.messages if m.kind == "send"])


def _traced_in_subgroup(rank: int, world: int) -> list[int]:
    """Events made while a sub-group is this thread's group (HSDP's shard group on the
    communication thread) still go on the process's own track."""
    import torch.distributed as dist

    pairs = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    mine = pairs[rank // 2]
    with trace.recording() as rec, groups.use_group(mine):
        trace.instant("in subgroup", lane="comm")
        ring_all_reduce(torch.ones(4), group=mine)
    return sorted({e["pid"] for e in rec.events})


def test_subgroup_events_go_on_the_global_ranks_track(process_world):
    assert process_world(4).run(_traced_in_subgroup) == [[0], [1], [2], [3]]
