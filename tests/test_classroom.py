"""The classroom's recording and page without a browser: what the run itself says.

    pytest tests/test_classroom.py

The scenes are recorded once for this module and the browser tests (small sizes; rank
processes from the session's worlds where time is what a scene teaches, threads for DP
and memory). Checked here against the reference, not against the page: the ring's result
against ``torch.distributed.all_reduce``, the bytes per rank against the lessons'
formulas, the link's α and β against lesson 6's fit of the same samples, memory against
the measured tensors' own events.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from minidp.tools.classroom import Options, build_html, record, write_page
from minidp.tools.classroom.page import recognised
from minidp.tools.recorder.ring import fit

OPTIONS = Options(world_size=4, numel=8, devices=2, batch=4, width=16)
LESSONS = Path(__file__).resolve().parents[1] / "lessons"
_ONCE: dict = {}


def recorded_once(process_world) -> dict:
    """Every scene, recorded once per session: this module and the browser tests read the
    same run (recording costs seconds). Rank processes come from conftest's
    ``process_world`` (started once, shared with every process test)."""
    if "data" not in _ONCE:
        _ONCE["data"] = record(OPTIONS, progress=lambda _: None, world=process_world)
    return _ONCE["data"]


@pytest.fixture(scope="module")
def recorded(process_world) -> dict:
    return recorded_once(process_world)


def named(data: dict, name: str) -> list[dict]:
    return [e for e in data["traceEvents"] if e.get("name") == name]


def embedded(html: str, id_: str):
    m = re.search(rf'<script type="application/json" id="{id_}">(.*?)</script>', html, re.S)
    assert m, f"no <script id={id_}> in the page"
    return json.loads(m.group(1))


def test_page_is_self_contained(recorded):
    html = build_html(recorded)
    assert html.count("<script") == 5  # trace, scenes, lessons, library, code: all inline
    # the page itself (its data blocks aside: JSON, never run) fetches nothing: no external
    # src/href, no <link>, no network API in the code, no path to this machine's files
    code = re.sub(r'<script type="application/json".*?</script>', "", html, flags=re.S)
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:|file:)?//""", code)
    assert "<link" not in code and "fetch(" not in code and "XMLHttpRequest" not in code
    assert "Classroom.start()" in code and "file:///" not in html


def test_embedded_trace_equals_the_recorded_run(recorded):
    page = embedded(build_html(recorded), "trace")
    assert page == json.loads(json.dumps(recorded))
    assert page["otherData"]["scenes"] == list(OPTIONS.only)
    names = {e["name"] for e in page["traceEvents"]}
    # the library's own events (DDP hooks, buckets and their layout, FSDP units) untouched
    assert {"grad ready", "bucket launch", "ddp buckets", "all-gather unit 1", "ring step"} <= names
    assert set(recognised(recorded)) == set(OPTIONS.only)


def test_lessons_are_embedded_as_they_are(recorded):
    lessons = embedded(build_html(recorded), "lessons")
    assert "08_ring_all_reduce.py" in lessons and "37_hsdp.py" in lessons
    for name, text in lessons.items():
        assert text == (LESSONS / name).read_text(), name


def test_the_ring_is_the_books(recorded):
    # the book's ring (lesson 8's page) sends exactly one message per rank per step and no
    # header check (the engine's ring, through a tapped group, sends its header first)
    W = OPTIONS.world_size
    for rank in range(W):
        sends = [e for e in named(recorded, "send") if e["pid"] == rank]
        assert len(sends) == 2 * (W - 1), f"rank {rank}: {len(sends)} sends"
        assert {e["args"]["peer"] for e in sends} == {(rank - 1) % W}  # r -> r-1 only
    steps = named(recorded, "ring step")  # the book's schedule
    for e in steps:
        r, k = e["pid"], e["args"]["step"]
        want = (r + k) % W  # reduce-scatter step k: chunk r+k; all-gather step W+s: r+s
        assert e["args"]["chunk"] == want and e["args"]["to"] == (r - 1) % W, e["args"]


def test_ring_values_are_the_run_and_match_torch(recorded):
    inputs = {e["pid"]: e["args"]["holds"] for e in named(recorded, "ring inputs")}
    results = [e["args"] for e in named(recorded, "ring result")]
    total = sum(torch.tensor([v for c in inputs[r] for v in c]) for r in inputs)
    assert all(r["result"] == total.tolist() and r["torch_equal"] for r in results)
    assert named(recorded, "ring inputs")[0]["args"]["digits"] == 1  # 8 elements: 10^r
    for e in named(recorded, "ring step"):  # a step ends when its receive has completed
        recvs = [r["ts"] for r in named(recorded, "recv") if r["pid"] == e["pid"]]
        assert e["ts"] + e["dur"] == pytest.approx(sorted(recvs)[-6:][e["args"]["step"] - 1])


def test_traffic_data_bytes_are_the_lessons_formulas(recorded):
    msgs = named(recorded, "traffic message")
    S = named(recorded, "all-reduce: ring")[0]["args"]["bytes"]
    W = OPTIONS.world_size

    def sent(algo, rank, header=False):
        return sum(e["args"]["bytes"] for e in msgs if e["args"]["algorithm"] == algo
                   and e["pid"] == rank and e["args"]["header"] == header)  # fmt: skip

    for r in range(W):  # lesson 8: every ring rank sends 2(n-1)/n * S
        assert sent("ring", r) == 2 * (W - 1) * S // W
        assert sent("parameter server", r) == ((W - 1) * S if r == 0 else S)  # lesson 7
    # the check before each collective: one header to every peer, apart from the data
    heads = [e for e in msgs if e["args"]["header"]]
    assert len(heads) == 2 * W * (W - 1) and all(e["args"]["step"] == 0 for e in heads)
    steps = {e["args"]["step"] for e in msgs if e["args"]["algorithm"] == "ring"} - {0}
    assert steps == set(range(1, 2 * (W - 1) + 1))


def test_alpha_beta_is_lesson_6s_fit_of_its_samples(recorded):
    (link,) = named(recorded, "link alpha-beta")
    samples = link["args"]["samples"]
    assert [n for n, _ in samples] == sorted(n for n, _ in samples) and len(samples) >= 5
    # lesson 6: alpha = the smallest message's one-way time; beta = extra bytes / extra time
    text = (LESSONS / "06_send_recv.py").read_text()
    assert "alpha = times[small]" in text and "beta = (big - small) / extra" in text
    small, big = samples[0], samples[-1]
    assert link["args"]["alpha_us"] == small[1]
    if big[1] > small[1]:
        assert link["args"]["beta_bytes_per_us"] == pytest.approx(
            (big[0] - small[0]) / (big[1] - small[1])
        )
    assert fit([(8, 10.0), (108, 10.0)]) == (10.0, None)  # no bandwidth to read: said so


def test_ddp_scene_has_a_backward_span_and_the_librarys_layout(recorded):
    layouts = named(recorded, "ddp buckets")
    ready = {e["args"]["param"] for e in named(recorded, "grad ready") if e["pid"] == 0}
    assert len(layouts) == 2  # one per rank: written by minidp's DDP itself
    params = [p for b in layouts[0]["args"]["buckets"] for p in b["params"]]
    assert sorted(params) == sorted(ready) and len(layouts[0]["args"]["buckets"]) >= 2
    assert len([e for e in named(recorded, "backward") if e["ph"] == "X"]) == 2


def test_fsdp_gathers_are_seen_from_their_buffer_to_their_free(recorded):
    for name in ("unit gather start", "unit gathered", "unit freed"):
        assert named(recorded, name), name
    for start in named(recorded, "unit gather start"):
        same = (start["pid"], start["args"]["unit"])
        later = [e for e in named(recorded, "unit gathered") if e["ts"] >= start["ts"]]
        gathered = next(e for e in later if (e["pid"], e["args"]["unit"]) == same)
        # the (world, T) buffer holds every rank's padded shard: at least the full unit
        assert start["args"]["buffer"] >= gathered["args"]["bytes"] > 0
    labels = {e["args"]["unit"] for e in named(recorded, "unit gathered")}
    hsdp = {e["args"]["unit"] for e in named(recorded, "hsdp unit")}
    assert labels == hsdp  # FSDP and HSDP name the same layers the same way


def test_memory_events_explain_zero1_and_fsdps_transients(recorded):
    mem = named(recorded, "memory")
    assert len(mem) == 4 * 4 * OPTIONS.ddp_world  # stages x points x ranks
    # the second step: the optimizer state is there from its start (DDP's is ZeRO-1's x W)
    start = {e["args"]["stage"]: e["args"] for e in mem if e["pid"] == 0
             and e["args"]["point"] == "step start"}  # fmt: skip
    assert start["ddp"]["optimizer"] > start["zero1"]["optimizer"] > 0
    assert all(a["grads"] == 0 for s, a in start.items() if s != "zero2")  # zero_grad: None
    # DDP and ZeRO: a measurement as each gradient lands, growing through backward
    landed = [e["args"] for e in named(recorded, "memory grad") if e["pid"] == 0]
    ddp = [a["grads"] for a in landed if a["stage"] == "ddp"]
    assert len(ddp) == 8 and ddp == sorted(ddp) and ddp[0] < ddp[-1]
    owned = [e["args"]["owned"] for e in mem if e["args"]["stage"] == "zero1"
             and e["args"]["point"] == "after step"]  # fmt: skip
    names = sorted(n for o in owned for n, _ in o)
    assert len(names) == len(set(names)) == 8  # every parameter owned by exactly one rank
    trans = [e for e in recorded["traceEvents"] if e.get("name", "").startswith("memory ")
             and e["name"] != "memory grad"]  # fmt: skip
    assert {e["args"]["stage"] for e in trans} == {"fsdp"} and len(trans) >= 6
    # FSDP's backward holds each unit's full gradients and their reduce-scatter input
    # until the reduce-scatter ends: observed, and released in the same amounts
    for rank in range(OPTIONS.ddp_world):
        held = {}
        for e in (e for e in trans if e["pid"] == rank):
            if e["name"] == "memory grads":
                held[e["args"]["unit"]] = e["args"]["bytes"]
            elif e["name"] == "memory reduced":
                assert held.pop(e["args"]["unit"]) > 0
        assert held == {}, f"rank {rank}: gradients never released: {held}"


def test_fsdp_shards_are_the_ranks_own_bytes(recorded):
    # a sharded parameter is a DTensor: its nbytes is the global tensor's; a rank holds its
    # to_local() rows. The scene's number equals the memory scene's (measured storages) and
    # is the model's bytes / W (the MLP's rows split evenly at width 16 on 2 ranks)
    from minidp.tools.recorder import mlp

    w = OPTIONS.width
    total = sum(p.nbytes for p in mlp(w, w, w, w, 4).parameters())  # plain: the whole model
    start = [e for e in named(recorded, "memory") if e["args"]["point"] == "step start"]
    fsdp_params = {e["pid"]: e["args"]["params"] for e in start if e["args"]["stage"] == "fsdp"}
    for e in named(recorded, "fsdp shards"):
        assert e["args"]["bytes"] == fsdp_params[e["pid"]] == total // OPTIONS.ddp_world, e


def test_every_size_a_recorder_reads_says_which():
    # the check tests/test_local_sizes.py runs on the lessons, planner and book, on the
    # recorder: a size read on a parameter or gradient says local or global
    from test_local_sizes import unsaid_size_reads

    recorders = sorted((Path(__file__).resolve().parents[1] / "minidp/tools/recorder").glob("*.py"))
    assert len(recorders) == 6
    for path in recorders:
        assert unsaid_size_reads(path.read_text(), path.name) == []
    mutant = (
        "def f(model):\n    return sum(p.numel() * p.element_size() for p in model.parameters())\n"
    )
    assert unsaid_size_reads(mutant, "old rec_fsdp")  # the line this scene had: caught


def test_a_library_trace_builds_a_page(tmp_path):
    from minidp import trace

    with trace.recording() as rec:  # what a user saves with minidp.trace under torchrun
        with trace.span("forward", lane="compute"):
            trace.instant("grad ready", lane="backward", param="w", index=0)
    path = trace.save(tmp_path / "user.json", rec.events)
    page = write_page(json.loads(path.read_text()), tmp_path / "out")
    assert embedded(page.read_text(), "trace")["traceEvents"][0]["name"] == "forward"


# ---- HSDP: the run itself says what the scene claims ------------------------------------------


def hsdp(recorded) -> tuple[dict, list[dict], dict]:
    """(mesh event args per rank, sends, unit sizes of rank 0) of the HSDP scene."""
    mesh = {e["pid"]: e["args"] for e in named(recorded, "hsdp mesh")}
    units = {e["args"]["unit"]: e["args"] for e in named(recorded, "hsdp unit") if e["pid"] == 0}
    return mesh, named(recorded, "hsdp send"), units


def test_hsdp_rows_shard_and_columns_replicate(recorded):
    mesh, _, _ = hsdp(recorded)
    assert sorted(mesh) == [0, 1, 2, 3]
    for rank, m in mesh.items():  # 2 x 2: rank = 2 * node + position in the node
        assert m["mesh"] == [[0, 1], [2, 3]]
        assert m["shard"] == [2 * (rank // 2), 2 * (rank // 2) + 1], f"rank {rank}"
        assert m["replicate"] == [rank % 2, rank % 2 + 2], f"rank {rank}"


def test_hsdp_only_the_shard_crosses_nodes(recorded):
    mesh, sends, units = hsdp(recorded)
    node = {r: i for i, row in enumerate(mesh[0]["mesh"]) for r in row}
    across = [e for e in sends if node[e["pid"]] != node[e["args"]["to"]]]
    within = [e for e in sends if node[e["pid"]] == node[e["args"]["to"]]]
    # across nodes: the all-reduces and nothing else; within: all-gathers, reduce-scatters
    assert {e["args"]["collective"] for e in across} == {"all-reduce"}
    assert {e["args"]["collective"] for e in within} == {"all-gather", "reduce-scatter"}
    assert all(e["args"]["group"] == "replicate" for e in across)
    for rank in mesh:
        for unit, size in units.items():
            mine = [
                e["args"]["bytes"] for e in across if e["pid"] == rank and e["args"]["unit"] == unit
            ]
            # the data a rank sends to the other node is its shard, 1/S of the unit (the
            # other messages are the collective's small headers, whatever their size)
            assert size["shard"] == size["full"] // 2 and size["shard"] in mine, (
                f"rank {rank}, {unit}: expected the {size['shard']} B shard among {mine}"
            )
        out = sum(e["args"]["bytes"] for e in across if e["pid"] == rank)
        assert 0 < out < sum(u["full"] for u in units.values())  # less than a full gradient
        assert out < sum(e["args"]["bytes"] for e in within if e["pid"] == rank)


def test_hsdp_gathers_say_forward_or_backward(recorded):
    _, sends, _ = hsdp(recorded)
    phases = {}
    for e in sends:
        if e["args"]["collective"] == "all-gather":
            phases.setdefault(e["args"]["unit"], set()).add(e["args"]["phase"])
    # units re-gathered for backward: the same unit's all-gathers in both phases
    assert any(p == {"forward", "backward"} for p in phases.values()), phases
    assert all(
        e["args"]["phase"] == "backward" for e in sends if e["args"]["collective"] != "all-gather"
    )
