"""The sharded scenes in a real browser: ZeRO/FSDP memory, FSDP units, HSDP's mesh and bytes.

    pytest tests/test_classroom_browser_shard.py

As in tests/test_classroom_browser.py (whose helpers and recording this file shares):
Chromium with the network blocked; what the page shows at step k, read from the DOM's data
attributes, must equal what the trace holds for step k, computed here independently of the
page's JavaScript.
"""

from __future__ import annotations

import collections
import json
import re

from test_classroom_browser import browser_page, dom, events, recorded, select, step_to

__all__ = ["browser_page", "recorded"]  # the shared fixtures, used by name below


def test_memory_bytes_equal_the_trace(browser_page, recorded):
    page, _ = browser_page
    mem = [e for e in events(recorded[0]) if e["name"] == "memory"]
    keys = list(dict.fromkeys((e["args"]["stage"], e["args"]["point"]) for e in mem))
    assert len(keys) == 16  # 4 stages x 4 points
    parts = ("params", "grads", "optimizer", "buckets")
    select(page, "memory")
    for k, (stage, point) in enumerate(keys):
        step_to(page, k)
        shown = {
            (int(r), p): int(n)
            for r, p, n in dom(
                page, "#memory-steps [data-part]", "data-rank", "data-part", "data-bytes"
            )
        }
        expect = {
            (e["pid"], p): e["args"][p]
            for e in mem
            if (e["args"]["stage"], e["args"]["point"]) == (stage, point)
            for p in parts
        }
        assert shown == expect, f"memory {stage} {point}"
        # side by side: every stage at this step's point, one column each
        assert page.get_attribute("#memory-compare", "data-point") == point
        columns = page.eval_on_selector_all(
            "#memory-compare [data-part]",
            "els => els.map(e => [e.closest('[data-stage]').dataset.stage, e.dataset.rank,"
            " e.dataset.part, e.dataset.bytes])",
        )
        side = {(s, int(r), p): int(n) for s, r, p, n in columns}
        want = {
            (e["args"]["stage"], e["pid"], p): e["args"][p]
            for e in mem
            if e["args"]["point"] == point
            for p in parts
        }
        assert side == want, f"memory side by side at step {k} ({point})"
        assert len(columns) == len(want) == 4 * 2 * 4  # stages x ranks x parts


def test_fsdp_units_and_bytes_equal_the_trace(browser_page, recorded):
    page, _ = browser_page
    unit = r"(unit \d+|root)$"
    pat = re.compile(
        rf"^((issue all-gather|all-gather|forward|backward|reduce-scatter) {unit}"
        r"|unit gathered|unit freed|wait reduce-scatters)"
    )
    seq = [e for e in events(recorded[0]) if e["pid"] == 0 and pat.match(e["name"])]
    select(page, "fsdp")
    assert int(page.get_attribute("#scrub", "max")) == len(seq)
    gathered_some = False
    for k in range(len(seq) + 1):
        step_to(page, k)
        state, held = {}, 0
        for e in seq[:k]:
            if e["name"].startswith("issue all-gather "):  # prefetch asked, not yet arrived
                u = e["name"].removeprefix("issue all-gather ")
                state[u] = "gathered" if state.get(u) == "gathered" else "issued"
            elif e["name"] == "unit gathered":
                state[e["args"]["unit"]], held = "gathered", held + e["args"]["bytes"]
            elif e["name"] == "unit freed":
                state[e["args"]["unit"]], held = "sharded", held - e["args"]["bytes"]
        shown = dict(dom(page, ".card[data-unit]", "data-unit", "data-state"))
        for u, s in state.items():
            assert shown[u] == s, f"fsdp step {k}, {u}"
        assert int(page.get_attribute("#fsdp-memory", "data-bytes")) == held, f"fsdp step {k}"
        gathered_some |= held > 0
    assert gathered_some


def test_hsdp_links_and_bytes_equal_the_trace(browser_page, recorded):
    page, _ = browser_page
    ev = events(recorded[0])
    sends = [e for e in ev if e["name"] == "hsdp send"]
    meshes = {e["pid"]: e["args"] for e in ev if e["name"] == "hsdp mesh"}
    units = {e["args"]["unit"] for e in ev if e["name"] == "hsdp unit"}
    node = {r: i for i, row in enumerate(meshes[0]["mesh"]) for r in row}
    order = {"all-gather": 0, "reduce-scatter": 1, "all-reduce": 2}
    key = lambda e: (e["args"]["call"], e["args"]["collective"])  # noqa: E731
    keys = sorted({key(e) for e in sends}, key=lambda k: (k[0], order[k[1]]))
    select(page, "hsdp")
    assert int(page.get_attribute("#scrub", "max")) == len(keys)
    crossed = False
    for k in range(len(keys) + 1):
        step_to(page, k)
        now = [e for e in sends if k and key(e) == keys[k - 1]]
        done = [e for e in sends if key(e) in keys[:k]]
        caption = dom(page, "#caption [data-collective]", "data-collective", "data-unit")
        assert caption == [
            [now[0]["args"]["collective"], now[0]["args"]["unit"]] if k else ["", ""]
        ]
        links = collections.Counter()
        for e in now:
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


def test_no_errors_in_the_sharded_scenes(browser_page):
    _, problems = browser_page
    assert problems == []
