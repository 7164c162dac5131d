"""The classroom page in a real browser: Debian's Chromium driven by playwright.

    apt-get install -y chromium && pip install playwright
    pytest tests/test_classroom_browser.py

The network is blocked (only file:// loads); the page must raise no console or page error;
every scene steps forward and back from the keyboard; and what the page shows at step k —
read from the DOM's data attributes — equals what the trace holds for step k, computed
here independently of the page's JavaScript. This file: the player and the ring, traffic,
DP and DDP scenes (and the helpers); tests/test_classroom_browser_shard.py: memory, FSDP
and HSDP.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from minidp.classroom import write_page

CHROMIUM = "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else shutil.which("chromium")
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright not installed (pip)")
if CHROMIUM is None:
    pytest.skip("no chromium (apt-get install -y chromium)", allow_module_level=True)

SCENES = ("ring", "traffic", "dp", "ddp", "memory", "fsdp", "hsdp")


_SHARED: dict = {}  # one Chromium, recording and page for every classroom browser test


def chromium(request):
    """The session's Chromium (playwright allows one sync instance at a time, and a start
    costs seconds), closed when the session ends; tests/test_classroom_serve.py uses it too."""
    if "browser" not in _SHARED:
        playwright = sync_api.sync_playwright().start()
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        request.config.add_cleanup(playwright.stop)  # after browser.close: cleanups run LIFO
        request.config.add_cleanup(browser.close)
        _SHARED["browser"] = browser
    return _SHARED["browser"]


def shared(request) -> tuple[tuple[dict, Path], tuple]:
    """((trace, page path), (page, problems)): made once per session, used by this file and
    tests/test_classroom_browser_shard.py. Only file:// may load."""
    if "both" not in _SHARED:
        from test_classroom import recorded_once  # tests/test_classroom.py reads it too

        data = recorded_once(request.getfixturevalue("process_world"))
        path = write_page(data, request.getfixturevalue("tmp_path_factory").mktemp("classroom"))
        page = chromium(request).new_page()
        problems: list[str] = []
        page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}"))
        page.on("pageerror", lambda e: problems.append(f"page error: {e}"))

        def only_files(route):
            if route.request.url.startswith("file:"):
                route.continue_()
            else:
                problems.append(f"network request: {route.request.url}")
                route.abort()

        page.route("**/*", only_files)
        page.goto(path.as_uri())
        _SHARED["both"] = ((json.loads(json.dumps(data)), path), (page, problems))
    return _SHARED["both"]


@pytest.fixture(scope="module")
def recorded(request):
    return shared(request)[0]


@pytest.fixture(scope="module")
def browser_page(request):
    return shared(request)[1]


# ---- the trace, read here the way the page must read it -----------------------------------


def events(data: dict) -> list[dict]:
    """Duration/instant events with their lane name, in time order (ties: rank, then file)."""
    lanes = {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in data["traceEvents"]
        if e.get("ph") == "M" and e["name"] == "thread_name"
    }
    out = [
        {**e, "lane": lanes.get((e["pid"], e["tid"]), str(e["tid"])), "args": e.get("args", {})}
        for e in data["traceEvents"]
        if e.get("ph") in ("X", "i")
    ]
    return sorted(out, key=lambda e: (e["ts"], e["pid"]))


def select(page, scene: str) -> None:
    page.click(f'nav [data-scene="{scene}"]')
    assert page.get_attribute("#step", "data-step") == "0"


def step_to(page, k: int) -> None:
    """Reach step ``k`` with the keyboard only (→ from wherever the counter is)."""
    now = int(page.get_attribute("#step", "data-step"))
    for _ in range(k - now):
        page.keyboard.press("ArrowRight")
    assert page.get_attribute("#step", "data-step") == str(k)


def dom(page, selector: str, *attrs: str) -> list[list[str]]:
    return page.eval_on_selector_all(
        selector, "(els, attrs) => els.map((e) => attrs.map((a) => e.getAttribute(a)))", list(attrs)
    )


# ---- tests ----------------------------------------------------------------------------------


def test_loads_offline_without_errors(browser_page):
    page, problems = browser_page
    assert page.title() == "minidp classroom"
    for scene in SCENES:
        page.click(f'nav [data-scene="{scene}"]')
        assert "absent" not in (page.get_attribute(f'nav [data-scene="{scene}"]', "class") or "")
    assert problems == []


@pytest.mark.parametrize("scene", SCENES)
def test_every_scene_steps_forward_and_back(browser_page, scene):
    page, problems = browser_page
    select(page, scene)
    last = int(page.get_attribute("#scrub", "max"))
    assert last >= 3
    for k in (1, 2, 3):
        page.keyboard.press("ArrowRight")
        assert page.get_attribute("#step", "data-step") == str(k)
    page.keyboard.press("ArrowLeft")
    assert page.get_attribute("#step", "data-step") == "2"
    page.keyboard.press("ArrowLeft")
    page.keyboard.press("ArrowLeft")
    page.keyboard.press("ArrowLeft")  # clamps at 0
    assert page.get_attribute("#step", "data-step") == "0"
    assert problems == []


def test_ring_cells_equal_the_trace_at_every_step(browser_page, recorded):
    page, _ = browser_page
    ev = events(recorded[0])
    holds = {(0, e["pid"]): e["args"]["holds"] for e in ev if e["name"] == "ring inputs"}
    for e in ev:
        if e["name"] == "ring step":
            holds[(e["args"]["step"], e["pid"])] = e["args"]["holds"]
    steps = max(k for k, _ in holds)
    assert steps == 6  # 2 (W - 1) at W = 4
    select(page, "ring")
    for k in range(steps + 1):
        step_to(page, k)
        cells = dom(page, "#ring-grid td", "data-rank", "data-chunk", "data-values")
        shown = {(int(r), int(c)): json.loads(v) for r, c, v in cells}
        expect = {(r, c): v for (s, r), row in holds.items() if s == k for c, v in enumerate(row)}
        assert shown == expect, f"ring step {k}"


def test_traffic_bytes_per_link_equal_the_trace(browser_page, recorded):
    page, _ = browser_page
    ev = events(recorded[0])
    spans = [e for e in ev if e["lane"] == "classroom" and e["name"].startswith("all-reduce: ")]

    def algo(e):
        for s in spans:
            if s["pid"] == e["pid"] and s["ts"] <= e["ts"] <= s["ts"] + s["dur"]:
                return s["args"]["algorithm"]

    sends = [(algo(e), e) for e in ev if e["name"] == "send" and algo(e)]
    select(page, "traffic")
    for k in range(0, len(sends) + 1, 7):
        step_to(page, k)
        link: dict = {}
        for a, e in sends[:k]:
            key = (a, e["pid"], e["args"]["peer"])
            link[key] = link.get(key, 0) + e["args"]["bytes"]
        cells = dom(page, "td[data-algo]", "data-algo", "data-src", "data-dst", "data-bytes")
        shown = {(a, int(s), int(d)): int(n) for a, s, d, n in cells if int(n)}
        assert shown == link, f"traffic step {k}"
    server = sum(n for (a, s, _), n in link.items() if a == "parameter server" and s == 0)
    ring0 = sum(n for (a, s, _), n in link.items() if a == "ring" and s == 0)
    assert server > ring0  # the server's link carries more than any ring rank's


def test_dp_tensors_equal_the_trace(browser_page, recorded):
    page, _ = browser_page
    ev = [e for e in events(recorded[0]) if e["name"].startswith("dp ")]
    stages = ["scatter", "replicate", "parallel_apply", "gather", "backward", "sum grads"]
    field = {"scatter": ("input", "input"), "replicate": ("weight", "weight"),
             "parallel_apply": ("output", "output"), "gather": ("gathered", "output"),
             "backward": ("grad", "grad"), "sum grads": ("summed", "grad")}  # fmt: skip
    select(page, "dp")
    for k in range(len(stages) + 1):
        step_to(page, k)
        cells = dom(page, ".card[data-device] .field", "data-field", "data-values")
        devices = dom(page, ".card[data-device]", "data-device")
        assert len(devices) == 2
        shown = page.eval_on_selector_all(
            ".field[data-field]",
            "els => els.map(e => [e.closest('[data-device]').dataset.device, e.dataset.field,"
            " JSON.parse(e.dataset.values)])",
        )
        expect = [
            [str(e["pid"]), field[s][0], e["args"][field[s][1]]]
            for s in stages[:k]
            for e in ev
            if e["args"]["stage"] == s
        ]
        assert sorted(map(json.dumps, shown)) == sorted(map(json.dumps, expect)), f"dp {k}"
        assert len(cells) == len(expect)


def test_ddp_hooks_and_buckets_equal_the_trace(browser_page, recorded):
    page, _ = browser_page
    ev = events(recorded[0])
    names = ("forward", "grad ready", "bucket launch", "bucket finish", "wait for buckets")
    seq = [
        e
        for e in ev
        if e["pid"] == 0 and (e["name"] in names or e["name"].startswith("all-reduce bucket "))
    ]
    select(page, "ddp")
    assert int(page.get_attribute("#scrub", "max")) == len(seq)
    for k in range(len(seq) + 1):
        step_to(page, k)
        done = seq[:k]
        ready = {e["args"]["param"] for e in done if e["name"] == "grad ready"}
        launched = {e["args"]["bucket"] for e in done if e["name"] == "bucket launch"}
        finished = {e["args"]["bucket"] for e in done if e["name"] == "bucket finish"}
        chips = dict(dom(page, ".chip[data-param]", "data-param", "data-ready"))
        assert {p for p, r in chips.items() if r == "1"} == ready, f"ddp step {k}"
        for b, state in dom(page, ".bucket", "data-bucket", "data-state"):
            want = (
                "reduced" if int(b) in finished else "launched" if int(b) in launched else "filling"
            )
            assert state == want, f"ddp step {k}, bucket {b}"
        event = page.get_attribute("#caption [data-event]", "data-event")
        assert event == (seq[k - 1]["name"] if k else "")
