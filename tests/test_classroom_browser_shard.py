"""The sharded scenes and the generic timeline in a real browser: memory over a step, FSDP's
units, HSDP's mesh and bytes, any trace's events.

    pytest tests/test_classroom_browser_shard.py

As in tests/test_classroom_browser.py (whose helpers and recording this file shares):
Chromium with the network blocked; what the page shows at step k, read from the DOM's data
attributes, must equal what the trace holds for step k, computed here independently of
the page's JavaScript, outlined timeline bars included.
"""

from __future__ import annotations

import collections
import json
import re

from test_classroom_browser import (
    browser_page,
    check_outlines,
    dom,
    events,
    outlined,
    recorded,
    select,
    step_to,
)

__all__ = ["browser_page", "recorded"]  # the shared fixtures, used by name below

MEASURED = ("params", "grads", "optimizer", "buckets")
PARTS = (*MEASURED, "buffer", "full", "fullgrads", "rsbuf")
POINTS = ("step start", "after forward", "after backward", "after step")


def memory_history(ev, stage, rank):
    """(measured points, changes per phase) of one stage on one rank: the bytes held at
    each — measured parts (at a point, or as a gradient lands) plus FSDP's all-gather
    buffers, gathered units, unsharded gradients and reduce-scatter inputs."""
    mine = [e for e in ev if e["pid"] == rank and e["name"].startswith("memory")]
    seq = sorted(
        (e for e in mine if e["args"].get("stage") == stage), key=lambda e: (e["ts"], e["id"])
    )
    points, subs, base, seg = {}, [[], [], [], []], None, -1
    held = dict.fromkeys(("buffer", "full", "fullgrads", "rsbuf"), 0)
    grads_of, input_of = {}, {}
    for e in seq:
        a, name = e["args"], e["name"]
        if name in ("memory", "memory grad"):
            base = {p: a[p] for p in MEASURED}
            if name == "memory grad":
                subs[seg].append({**base, **held})
            else:
                seg = POINTS.index(a["point"])
                points[seg] = {**base, **held}
            continue
        if name == "memory gather start":
            held["buffer"] += a["buffer"]
        elif name == "memory gathered":  # the moment both exist, then the buffer goes
            held["full"] += a["bytes"]
            subs[seg].append({**base, **held})
            held["buffer"] -= a["buffer"]
        elif name == "memory freed":
            held["full"] -= a["bytes"]
        elif name == "memory grads":
            grads_of[a["unit"]] = a["bytes"]
            held["fullgrads"] += a["bytes"]
        elif name == "memory reduce start":
            input_of[a["unit"]] = a["buffer"]
            held["rsbuf"] += a["buffer"]
        elif name == "memory reduced":
            held["fullgrads"] -= grads_of[a["unit"]]
            held["rsbuf"] -= input_of[a["unit"]]
        subs[seg].append({**base, **held})
    return points, subs


def test_memory_over_the_step_equals_the_trace(browser_page, recorded):
    page, _ = browser_page
    ev = events(recorded[0])
    mem = [e for e in ev if e["name"] == "memory"]
    stages = list(dict.fromkeys(e["args"]["stage"] for e in mem))
    ranks = sorted({e["pid"] for e in mem})
    hist = {(s, r): memory_history(ev, s, r) for s in stages for r in ranks}
    width = [max(len(h[1][i]) for h in hist.values()) for i in range(3)]
    assert width[0] > 0 and width[1] > 0  # FSDP gathers and frees in forward and backward
    positions = []
    for i in range(4):
        positions.append(("point", i))
        positions += [("sub", i, j) for j in range(width[i] if i < 3 else 0)]

    def value(s, r, p):  # each stage's changes spread across the phase: all end it together
        points, subs = hist[s, r]
        if p[0] == "point":
            return points[p[1]]
        i = (p[2] + 1) * len(subs[p[1]]) // width[p[1]] - 1
        return subs[p[1]][i] if i >= 0 else points[p[1]]

    total = lambda v: sum(v.values())  # noqa: E731
    peak = {(s, r): max(total(value(s, r, p)) for p in positions) for s in stages for r in ranks}
    shown = {}  # rank 0, and the rank holding the most where that is another
    for s in stages:
        most = max(ranks, key=lambda r: (peak[s, r], -r))
        shown[s] = [ranks[0]] + ([most] if peak[s, most] > peak[s, ranks[0]] else [])
    select(page, "memory")
    assert int(page.get_attribute("#scrub", "max")) == len(positions) - 1
    for k, p in enumerate(positions):
        step_to(page, k)
        want = {(s, r, q): n for s in stages for r in shown[s]
                for q, n in value(s, r, p).items() if n}  # fmt: skip
        shown_ = page.eval_on_selector_all(
            "#memory-compare [data-part]",
            "els => els.map(e => [e.closest('[data-stage]').dataset.stage, e.dataset.rank,"
            " e.dataset.part, e.dataset.bytes])",
        )
        assert {(s, int(r), q): int(n) for s, r, q, n in shown_} == want, f"memory position {k}"
    # the second step: DDP holds its optimizer state from the start, above ZeRO-1's
    assert total(value("ddp", 0, positions[0])) > total(value("zero1", 0, positions[0]))
    # FSDP's backward holds unsharded gradients and reduce-scatter inputs at some point
    back = [value("fsdp", 0, p) for p in positions if p[0] == "sub" and p[1] == 1]
    assert any(v["fullgrads"] and v["rsbuf"] for v in back)


def test_the_stage_lines_use_no_colour_a_bar_uses(browser_page):
    page, _ = browser_page
    select(page, "memory")
    css = "(els, key) => els.map(e => getComputedStyle(e)[key])"
    lines = set(page.eval_on_selector_all("#memory-chart polyline", css, "stroke"))
    swatches = "#stage .legend .sw[class*='part-']"
    parts = set(page.eval_on_selector_all(swatches, css, "backgroundColor"))
    assert len(lines) == 4 and len(parts) == len(PARTS)  # each its own colour
    assert not lines & parts


def test_zero1_owners_are_named(browser_page, recorded):
    page, _ = browser_page
    select(page, "memory")
    text = page.text_content("#zero1-owners")
    for e in events(recorded[0]):
        if (
            e["name"] == "memory"
            and e["args"]["stage"] == "zero1"
            and e["args"]["point"] == "after step"
        ):
            names = ", ".join(n for n, _ in e["args"]["owned"])
            assert f"rank {e['pid']} keeps the state of {names}" in text


UNIT = r"(unit \d+|root)$"
LIB = re.compile(rf"^(issue all-gather|all-gather|forward|backward|reduce-scatter) {UNIT}")
OURS = ("unit gathered", "unit freed", "wait reduce-scatters")
GRADS = ("unit grads", "unit reduce start", "unit reduced")


def unit_of(e) -> str:
    return e["args"].get("unit") or re.sub(
        r"^(issue all-gather|all-gather|forward|backward|reduce-scatter|wait all-gather) ",
        "",
        e["name"],
    )


def test_fsdp_units_memory_and_outlines_equal_the_trace(browser_page, recorded):
    page, _ = browser_page
    ev = events(recorded[0])
    seq = [e for e in ev if e["pid"] == 0 and (LIB.match(e["name"]) or e["name"] in OURS)]
    starts = [e for e in ev if e["pid"] == 0 and e["name"] == "unit gather start"]
    shards = next(e for e in ev if e["name"] == "fsdp shards" and e["pid"] == 0)["args"]["bytes"]
    select(page, "fsdp")
    assert int(page.get_attribute("#scrub", "max")) == len(seq)
    grew = with_grads = False
    grads = [e for e in ev if e["pid"] == 0 and e["name"] in GRADS]
    for k in range(len(seq) + 1):
        step_to(page, k)
        t = seq[k - 1]["ts"] if k else float("-inf")
        state = collections.defaultdict(lambda: "sharded")
        for e in seq:
            if e["ts"] > t or e["name"] == "wait reduce-scatters":
                continue
            u = unit_of(e)
            if e["name"].startswith("issue all-gather") and state[u] == "sharded":
                state[u] = "prefetch issued"
            if e["name"].startswith("all-gather"):
                state[u] = "all-gather in flight"
            if e["name"] == "unit gathered":
                state[u] = "gathered"
            if e["name"] == "unit freed":
                state[u] = "sharded"
        for u, s in dom(page, ".card[data-unit]", "data-unit", "data-state"):
            assert s == state[u], f"fsdp step {k}, {u}"
        h = dict.fromkeys(("buffer", "full", "grads", "input"), 0)
        peak, of = shards, {}
        kinds = ("unit gather start", "unit gathered", "unit freed")
        moves = [e for e in starts + seq + grads if e["name"] in kinds + GRADS and e["ts"] <= t]
        for e in sorted(moves, key=lambda e: (e["ts"], e["id"])):
            a = e["args"]
            if e["name"] == "unit gather start":
                h["buffer"] += a["buffer"]
            elif e["name"] == "unit gathered":  # buffer and full parameters both held here
                h["full"] += a["bytes"]
                peak = max(peak, shards + sum(h.values()))
                h["buffer"] -= a["buffer"]
            elif e["name"] == "unit freed":
                h["full"] -= a["bytes"]
            elif e["name"] == "unit grads":
                h["grads"] += of.setdefault(("g", a["unit"]), a["bytes"])
            elif e["name"] == "unit reduce start":
                h["input"] += of.setdefault(("i", a["unit"]), a["buffer"])
            else:  # reduced: the unit's full gradients and their input go
                h["grads"] -= of.pop(("g", a["unit"]))
                h["input"] -= of.pop(("i", a["unit"]))
            peak = max(peak, shards + sum(h.values()))
        keys = ("shards", "buffer", "full", "grads", "input", "peak")
        shown = [int(page.get_attribute("#fsdp-memory", f"data-{a}")) for a in keys]
        assert shown == [shards, h["buffer"], h["full"], h["grads"], h["input"], peak], f"step {k}"
        grew |= peak > shards + h["full"]  # a moment with buffer and full parameters at once
        with_grads |= h["grads"] > 0 and h["input"] > 0  # backward: a unit's gradients, copied
    assert grew and with_grads
    check_outlines(page, "fsdp", lambda k: [seq[k - 1]["id"]] if k else [])


def test_fsdp_shards_are_the_memory_scenes_and_the_traces(browser_page, recorded):
    # a rank's shards are its to_local() rows: the FSDP scene says the same bytes as the
    # trace and as the memory scene's FSDP parameters (measured storages); the global size
    # (what a DTensor's nbytes says) is twice that on 2 ranks
    page, _ = browser_page
    ev = events(recorded[0])
    trace_ = next(e for e in ev if e["name"] == "fsdp shards" and e["pid"] == 0)["args"]["bytes"]
    select(page, "fsdp")
    scene = int(page.get_attribute("#fsdp-memory", "data-shards"))
    assert f"rank 0 holds {kib(scene)} of shards" in page.text_content("#fsdp-memory")
    select(page, "memory")  # position 0: the step's start, measured
    part = '#memory-compare [data-stage="fsdp"] [data-part="params"][data-rank="0"]'
    memory = int(page.get_attribute(part, "data-bytes"))
    full = sum(e["args"]["bytes"] for e in ev if e["name"] == "unit gathered" and e["pid"] == 0
               and e["args"]["unit"] in {"unit 1", "unit 2", "unit 3", "root"})  # fmt: skip
    assert scene == trace_ == memory > 0
    assert scene * 2 <= full  # each unit gathered at least twice (forward, backward)


def kib(n: int) -> str:
    return f"{n} B" if n < 1024 else f"{n / 1024:.1f} KiB"


def hsdp_keys(sends):
    order = {"all-gather": 0, "reduce-scatter": 1, "all-reduce": 2}
    key = lambda e: (e["args"]["call"], e["args"]["collective"])  # noqa: E731
    return key, sorted({key(e) for e in sends}, key=lambda k: (k[0], order[k[1]]))


def test_hsdp_links_and_bytes_equal_the_trace(browser_page, recorded):
    page, _ = browser_page
    ev = events(recorded[0])
    sends = [e for e in ev if e["name"] == "hsdp send"]
    meshes = {e["pid"]: e["args"] for e in ev if e["name"] == "hsdp mesh"}
    units = {e["args"]["unit"] for e in ev if e["name"] == "hsdp unit"}
    node = {r: i for i, row in enumerate(meshes[0]["mesh"]) for r in row}
    key, keys = hsdp_keys(sends)
    select(page, "hsdp")
    assert int(page.get_attribute("#scrub", "max")) == len(keys)
    crossed = False
    for k in range(len(keys) + 1):
        step_to(page, k)
        now = [e for e in sends if k and key(e) == keys[k - 1]]
        done = [e for e in sends if key(e) in keys[:k]]
        caption = dom(
            page, "#caption [data-collective]", "data-collective", "data-unit", "data-phase"
        )
        assert caption == (
            [[now[0]["args"][a] for a in ("collective", "unit", "phase")]]
            if k
            else [["", "", None]]
        )
        links = collections.Counter()  # drawn: the data (the header check is in the tables)
        for e in now:
            if not e["args"]["header"]:
                links[e["pid"], e["args"]["to"]] += e["args"]["bytes"]
        shown = dom(page, "svg.mesh g.link", "data-src", "data-dst", "data-bytes", "data-scope")
        assert {(int(s), int(d)): int(b) for s, d, b, _ in shown} == dict(links), f"hsdp step {k}"
        for s, d, _, scope in shown:  # red across nodes: only an all-reduce's messages
            assert scope == ("intra" if node[int(s)] == node[int(d)] else "inter"), f"step {k}"
            crossed |= scope == "inter"
        rows = dom(page, "#hsdp-ranks tr[data-rank]", "data-rank", "data-node", "data-shard",
                   "data-replicate", "data-step-bytes", "data-intra", "data-inter")  # fmt: skip
        assert [int(r[0]) for r in rows] == sorted(meshes)
        for r, n, shard, rep, step, intra, inter in rows:
            r = int(r)
            mine = [e for e in done if e["pid"] == r]
            assert (int(n), json.loads(shard), json.loads(rep)) == (
                node[r], meshes[r]["shard"], meshes[r]["replicate"])  # fmt: skip
            assert int(step) == sum(e["args"]["bytes"] for e in now if e["pid"] == r), f"{k}, {r}"
            within = sum(e["args"]["bytes"] for e in mine if node[e["args"]["to"]] == node[r])
            across = sum(e["args"]["bytes"] for e in mine if node[e["args"]["to"]] != node[r])
            assert (int(intra), int(inter)) == (within, across), f"hsdp step {k}, rank {r}"
        cells = dom(page, "#hsdp-units td[data-unit]", "data-unit", "data-collective", "data-bytes")
        assert len(cells) == 3 * len(units)  # each unit: all-gather, reduce-scatter, all-reduce
        for unit, coll, per_rank in cells:
            want = [
                sum(e["args"]["bytes"] for e in done if e["pid"] == r
                    and (e["args"]["unit"], e["args"]["collective"]) == (unit, coll))
                for r in sorted(meshes)
            ]  # fmt: skip
            assert json.loads(per_rank) == want, f"hsdp step {k}, {unit} {coll}"
    assert crossed
    spans = [e for e in ev if e["ph"] == "X" and e["lane"] == "comm"
             and re.match(r"^hsdp (all-gather|reduce-scatter) ", e["name"])]  # fmt: skip

    def expect(k):  # the step's messages, and on each rank the collective span they are in
        now = [e for e in sends if k and key(e) == keys[k - 1]]
        held = {s["id"] for e in now for s in spans[:]
                if s["pid"] == e["pid"] and s["ts"] <= e["ts"] <= s["ts"] + s["dur"]}  # fmt: skip
        return {e["id"] for e in now} | held

    check_outlines(page, "hsdp", expect)


def test_generic_timeline_steps_through_every_event(browser_page, recorded):
    page, _ = browser_page
    ev = events(recorded[0])
    select(page, "trace")
    assert int(page.get_attribute("#scrub", "max")) == len(ev)
    assert page.get_attribute(".tl", "data-axis") == "wall"  # a whole trace: its own clock
    for k in (1, 2, len(ev) // 2, len(ev)):
        page.evaluate(f"location.hash = '#trace/{k}'")
        page.wait_for_function(f"document.getElementById('step').dataset.step === '{k}'")
        assert page.get_attribute("#caption [data-event]", "data-event") == ev[k - 1]["name"]
        assert outlined(page) == {ev[k - 1]["id"]}
    rows = page.eval_on_selector_all(".tl text.row-label", "els => els.map(e => e.textContent)")
    lanes = {(e["pid"], e["lane"]) for e in ev}
    assert sorted(rows) == sorted(f"rank {p} / {lane}" for p, lane in lanes)
    page.evaluate("location.hash = '#trace/0'")
    page.wait_for_function("document.getElementById('step').dataset.step === '0'")


def test_click_a_bar_to_step_to_it(browser_page, recorded):
    page, problems = browser_page
    ev = events(recorded[0])
    target = next(e for e in ev if e["name"] == "ring step" and e["args"]["step"] == 3)
    select(page, "ring")
    page.click(f'.tl rect[data-ev="{target["id"]}"]')
    assert page.get_attribute("#step", "data-step") == "3"
    page.click('.tl button[title^="zoom in"]')  # zoom: the bars grow, the step stays
    assert page.get_attribute("#step", "data-step") == "3" and problems == []
    page.click('.tl button[title^="whole"]')


def test_no_errors_in_the_sharded_scenes(browser_page):
    _, problems = browser_page
    assert problems == []
