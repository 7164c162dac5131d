"""The classroom page in a real browser: Debian's Chromium driven by playwright.

    apt-get install -y chromium && pip install playwright
    pytest tests/test_classroom_browser.py

The network is blocked (only file:// loads); the page must raise no console or page error;
every scene steps forward and back from the keyboard; and what the page shows at step k —
read from the DOM's data attributes — equals what the trace holds for step k, computed
here independently of the page's JavaScript, down to which timeline bars are outlined as
step k's (exactly its events, on either axis). This file: the player and the ring,
traffic, DP and DDP scenes (and the helpers); tests/test_classroom_browser_shard.py:
memory, FSDP, HSDP and the generic timeline; tests/test_classroom_layout.py: the
projector's layout and the what-if panel.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from minidp.tools.classroom import write_page

CHROMIUM = "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else shutil.which("chromium")
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright not installed (pip)")
if CHROMIUM is None:
    pytest.skip("no chromium (apt-get install -y chromium)", allow_module_level=True)

SCENES = ("ring", "traffic", "dp", "ddp", "memory", "fsdp", "hsdp", "whatif", "trace")
LESSONS = Path(__file__).resolve().parents[1] / "lessons"
_SHARED: dict = {}  # one Chromium, recording and page for every classroom browser test


def chromium(request):
    """The session's Chromium (playwright allows one sync instance at a time, and a start
    costs seconds), closed when the session ends; the other classroom tests use it too."""
    if "browser" not in _SHARED:
        playwright = sync_api.sync_playwright().start()
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        request.config.add_cleanup(playwright.stop)  # after browser.close: cleanups run LIFO
        request.config.add_cleanup(browser.close)
        _SHARED["browser"] = browser
    return _SHARED["browser"]


def open_page(request, url: str, viewport: dict | None = None):
    """(page, problems): ``url`` in a new tab of the session's Chromium; only file:// may
    load; every console message or page error lands in ``problems``."""
    page = chromium(request).new_page(viewport=viewport or {"width": 1400, "height": 900})
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
    page.goto(url)
    return page, problems


def shared(request) -> tuple[tuple[dict, Path], tuple]:
    """((trace, page path), (page, problems)): made once per session, used by every
    classroom browser test file."""
    if "both" not in _SHARED:
        from test_classroom import recorded_once  # tests/test_classroom.py reads it too

        data = recorded_once(request.getfixturevalue("process_world"))
        path = write_page(data, request.getfixturevalue("tmp_path_factory").mktemp("classroom"))
        page, problems = open_page(request, path.as_uri())
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
    """Drawable events with their lane name and id (their place in time order; ties: rank,
    then file order), as the page numbers them."""
    lanes = {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in data["traceEvents"]
        if e.get("ph") == "M" and e["name"] == "thread_name"
    }
    out = [
        {**e, "lane": lanes.get((e["pid"], e["tid"]), str(e["tid"])), "args": e.get("args", {})}
        for e in data["traceEvents"]
        if e.get("ph") in ("X", "i", "I")
    ]
    out = sorted(out, key=lambda e: (e["ts"], e["pid"]))
    for i, e in enumerate(out):
        e["id"] = i
    return out


def select(page, scene: str) -> None:
    page.click(f'nav [data-scene="{scene}"]')
    assert page.get_attribute("#step", "data-step") == "0"


def step_to(page, k: int) -> None:
    """Reach step ``k`` with the keyboard only (→ or ← from wherever the counter is)."""
    now = int(page.get_attribute("#step", "data-step"))
    for _ in range(abs(k - now)):
        page.keyboard.press("ArrowRight" if k > now else "ArrowLeft")
    assert page.get_attribute("#step", "data-step") == str(k)


def dom(page, selector: str, *attrs: str) -> list[list[str]]:
    return page.eval_on_selector_all(
        selector, "(els, attrs) => els.map((e) => attrs.map((a) => e.getAttribute(a)))", list(attrs)
    )


def outlined(page) -> set[int]:
    """Ids of the timeline's events outlined as this step's."""
    return {int(i) for (i,) in dom(page, ".tl [data-ev].hl", "data-ev")}


def check_outlines(page, scene: str, expect) -> None:
    """At every step, on both axes: the outlined bars are exactly ``expect(k)``'s events."""
    select(page, scene)
    last = int(page.get_attribute("#scrub", "max"))
    first = page.get_attribute(".tl", "data-axis")  # the scene's own (DDP: wall clock)
    for axis in (first, {"steps": "wall", "wall": "steps"}[first]):
        assert page.get_attribute(".tl", "data-axis") == axis
        for k in range(last + 1):
            step_to(page, k)
            assert outlined(page) == set(expect(k)), f"{scene} step {k} ({axis} axis)"
        page.keyboard.press("l")  # the other axis, for this scene's timeline (twice: back)
    step_to(page, 0)


# ---- tests ----------------------------------------------------------------------------------


def test_loads_offline_without_errors(browser_page):
    page, problems = browser_page
    assert page.title() == "minidp classroom"
    for i, scene in enumerate(SCENES, 1):
        button = f'nav [data-scene="{scene}"]'
        page.click(button)
        assert "absent" not in (page.get_attribute(button, "class") or "")
        assert page.text_content(f"{button} kbd") == str(i)  # the key that picks it, shown
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
    for _ in range(3):
        page.keyboard.press("ArrowLeft")  # clamps at 0
    assert page.get_attribute("#step", "data-step") == "0"
    assert problems == []


def test_the_address_picks_scene_and_step_without_reload(browser_page):
    page, _ = browser_page
    select(page, "ring")
    page.evaluate("location.hash = '#dp/3'")  # a teacher editing the address bar
    page.wait_for_function("document.getElementById('step').dataset.step === '3'")
    assert page.get_attribute("nav .active", "data-scene") == "dp"
    page.keyboard.press("2")
    assert page.get_attribute("nav .active", "data-scene") == "traffic"
    assert page.evaluate("location.hash") == "#traffic/0"


def test_lesson_link_opens_the_lesson_from_file(browser_page):
    page, problems = browser_page
    select(page, "ring")
    href = page.get_attribute("#scene-lesson", "href")
    assert href == "#lesson:08_ring_all_reduce.py"  # inside the page: no path to this disk
    page.click("#scene-lesson")
    assert page.is_visible("#lesson-box")
    assert page.text_content("#lesson-text") == (LESSONS / "08_ring_all_reduce.py").read_text()
    page.keyboard.press("Escape")
    assert not page.is_visible("#lesson-box") and problems == []


def test_ring_cells_and_outlines_equal_the_trace(browser_page, recorded):
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
        moves = dom(page, "svg.topo g.move:not([data-src='']) text.move-label", "x")
        assert len(moves) == (4 if k else 0)  # this step's four messages, each labelled
    check_outlines(page, "ring", lambda k: [e["id"] for e in ev if e["name"] == "ring step"
                                            and e["args"]["step"] == k])  # fmt: skip


def traffic_order(ev: list[dict]) -> list[tuple[str, int]]:
    spans = [e for e in ev if e["lane"] == "classroom" and e["name"].startswith("all-reduce: ")]
    algos = list(dict.fromkeys(e["args"]["algorithm"] for e in spans))
    data = [e for e in ev if e["name"] == "traffic message" and not e["args"]["header"]]
    steps = {
        a: sorted({e["args"]["step"] for e in data if e["args"]["algorithm"] == a}) for a in algos
    }
    return [(a, s) for a in algos for s in steps[a]]


def test_traffic_bytes_bars_and_outlines_equal_the_trace(browser_page, recorded):
    page, _ = browser_page
    ev = events(recorded[0])
    data = [e for e in ev if e["name"] == "traffic message" and not e["args"]["header"]]
    order = traffic_order(ev)
    select(page, "traffic")
    assert int(page.get_attribute("#scrub", "max")) == len(order) == 2 + 6
    for k in range(len(order) + 1):
        step_to(page, k)
        done = [e for e in data if (e["args"]["algorithm"], e["args"]["step"]) in order[:k]]
        link: dict = {}
        for e in done:
            key = (e["args"]["algorithm"], e["pid"], e["args"]["to"])
            link[key] = link.get(key, 0) + e["args"]["bytes"]
        cells = dom(page, "td[data-algo]", "data-algo", "data-src", "data-dst", "data-bytes")
        assert {(a, int(s), int(d)): int(n) for a, s, d, n in cells if int(n)} == link, k
        bars = dom(page, "[data-bar-bytes][data-algo]", "data-algo", "data-rank", "data-bar-bytes")
        sent = {(a, int(r)): int(n) for a, r, n in bars}
        assert sent == {(a, r): sum(n for (b, s, _), n in link.items() if (b, s) == (a, r))
                        for a, _ in order for r in range(4)}, k  # fmt: skip
    heads = sum(
        e["args"]["bytes"] for e in ev if e["name"] == "traffic message" and e["args"]["header"]
    )
    assert int(page.get_attribute("#traffic-headers", "data-bytes")) == heads > 0
    check_outlines(
        page,
        "traffic",
        lambda k: (
            []
            if not k
            else [
                e["id"] for e in data if (e["args"]["algorithm"], e["args"]["step"]) == order[k - 1]
            ]
        ),
    )


STAGES = ["scatter", "replicate", "parallel_apply", "gather", "backward", "sum grads"]


def test_dp_tensors_and_outlines_equal_the_trace(browser_page, recorded):
    page, _ = browser_page
    ev = [e for e in events(recorded[0]) if e["name"].startswith("dp ")]
    field = {"scatter": ("input", "input"), "replicate": ("weight", "weight"),
             "parallel_apply": ("output", "output"), "gather": ("gathered", "output"),
             "backward": ("grad", "grad"), "sum grads": ("summed", "grad")}  # fmt: skip
    select(page, "dp")
    for k in range(len(STAGES) + 1):
        step_to(page, k)
        assert len(dom(page, ".card[data-device]", "data-device")) == 2
        shown = page.eval_on_selector_all(
            ".field[data-field]",
            "els => els.map(e => [e.closest('[data-device]').dataset.device, e.dataset.field,"
            " JSON.parse(e.dataset.values)])",
        )
        now = STAGES[k - 1] if k else None
        expect = [[str(e["pid"]), field[now][0], e["args"][field[now][1]]]
                  for e in ev if e["args"]["stage"] == now]  # fmt: skip
        assert sorted(map(json.dumps, shown)) == sorted(map(json.dumps, expect)), f"dp {k}"
    check_outlines(
        page, "dp", lambda k: [e["id"] for e in ev if k and e["args"]["stage"] == STAGES[k - 1]]
    )


def ddp_seq(ev: list[dict]) -> list[dict]:
    names = ("forward", "ddp buckets", "grad ready", "bucket launch", "bucket finish",
             "wait for buckets")  # fmt: skip
    return [e for e in ev if e["pid"] == 0
            and (e["name"] in names or e["name"].startswith("all-reduce bucket "))]  # fmt: skip


def test_ddp_hooks_buckets_and_outlines_equal_the_trace(browser_page, recorded):
    page, _ = browser_page
    ev = events(recorded[0])
    seq = ddp_seq(ev)
    layout = next(e for e in seq if e["name"] == "ddp buckets")["args"]["buckets"]
    select(page, "ddp")
    assert int(page.get_attribute("#scrub", "max")) == len(seq)
    for k in range(len(seq) + 1):
        step_to(page, k)
        done = seq[:k]
        ready = {e["args"]["param"] for e in done if e["name"] == "grad ready"}
        launched = {e["args"]["bucket"] for e in done if e["name"] == "bucket launch"}
        finished = {e["args"]["bucket"] for e in done if e["name"] == "bucket finish"}
        chips = dom(page, ".chip[data-param]", "data-param", "data-ready")
        assert sorted(p for p, _ in chips) == sorted(p for b in layout for p in b["params"])
        assert {p for p, r in chips if r == "1"} == ready, f"ddp step {k}"
        for b, state in dom(page, ".bucket", "data-bucket", "data-state"):
            want = (
                "reduced" if int(b) in finished else "launched" if int(b) in launched else "filling"
            )
            assert state == want, f"ddp step {k}, bucket {b}"
        assert page.get_attribute("#caption [data-event]", "data-event") == (
            seq[k - 1]["name"] if k else ""
        )
    check_outlines(
        page,
        "ddp",
        lambda k: [seq[k - 1]["id"]] if k and seq[k - 1]["name"] != "ddp buckets" else [],
    )


def links(page, where: str = "") -> set[tuple[int, int]]:
    """(src, dst) of every arrow in the pictures (under ``where``)."""
    arrows = dom(page, f"{where} svg.topo g.move", "data-src", "data-dst")
    return {(int(a), int(b)) for a, b in arrows}


def test_the_ring_at_rest_points_the_way_data_moves(browser_page):
    page, _ = browser_page
    select(page, "ring")
    at_rest = links(page)
    assert at_rest == {(r, (r - 1) % 4) for r in range(4)}  # every send goes r -> r-1
    step_to(page, 1)
    assert links(page) == at_rest
    select(page, "traffic")  # the faint ring beside the server's first steps
    assert links(page, '.card[data-algo="ring"]') == at_rest


def test_keys_work_after_any_control(browser_page):
    page, problems = browser_page
    select(page, "ring")
    last = int(page.get_attribute("#scrub", "max"))
    page.select_option("#speed", "500")  # the speed menu keeps the focus: keys must still work
    page.keyboard.press("ArrowRight")
    assert page.get_attribute("#step", "data-step") == "1"
    page.click("#next")  # a button has the focus: space plays/pauses, it does not click it again
    assert page.get_attribute("#step", "data-step") == "2"
    page.keyboard.press("ArrowRight")
    assert page.get_attribute("#step", "data-step") == "3"
    page.focus("#scrub")  # the scrubber: one step per arrow, not two
    page.keyboard.press("ArrowLeft")
    assert page.get_attribute("#step", "data-step") == "2"
    page.keyboard.press("End")
    assert page.get_attribute("#step", "data-step") == str(last)
    page.keyboard.press("Home")
    assert page.get_attribute("#step", "data-step") == "0"
    page.click('nav [data-scene="dp"]')
    page.keyboard.press("End")
    assert page.get_attribute("#step", "data-step") == page.get_attribute("#scrub", "max")
    page.click("#play")
    page.keyboard.press(" ")  # pauses (the focused play button is not clicked a second time)
    assert page.text_content("#play") == "play"
    page.select_option("#speed", "1000")
    assert problems == []


def test_projector_mode_from_the_address_and_kept_on_reload(request, recorded):
    page, problems = open_page(request, recorded[1].as_uri() + "#traffic/2?projector=1")
    projector = "document.body.classList.contains('projector')"
    assert page.evaluate(projector) and page.get_attribute("#step", "data-step") == "2"
    page.keyboard.press("p")
    assert not page.evaluate(projector) and "projector" not in page.evaluate("location.hash")
    page.keyboard.press("p")
    page.keyboard.press("ArrowRight")
    assert page.evaluate("location.hash") == "#traffic/3?projector=1"
    page.reload()
    assert page.evaluate(projector) and page.get_attribute("#step", "data-step") == "3"
    page.close()
    assert problems == []


def test_ddp_reads_overlap_on_the_wall_clock(browser_page, recorded):
    page, _ = browser_page
    select(page, "ddp")
    # the logical axis gives every event a column: an all-reduce spanning many reads as
    # overlap it may not have had; the scene opens on time, and says so on the other axis
    assert page.get_attribute(".tl", "data-axis") == "wall"
    page.keyboard.press("l")
    assert "not per unit of time" in page.text_content(".tl")
    page.keyboard.press("l")
    ev = events(recorded[0])
    wait = next(e for e in ev if e["pid"] == 0 and e["name"] == "wait for buckets")
    during = sum(max(0, min(e["ts"] + e["dur"], wait["ts"]) - e["ts"]) for e in ev
                 if e["pid"] == 0 and e["name"].startswith("all-reduce bucket "))  # fmt: skip
    assert float(page.get_attribute("#ddp-overlap", "data-during")) == pytest.approx(during)


def test_the_model_gap_is_explained_beside_both_numbers(browser_page, recorded):
    page, _ = browser_page
    select(page, "ring")
    steps = [e for e in events(recorded[0]) if e["name"] == "ring step"]
    link = next(e for e in recorded[0]["traceEvents"] if e.get("name") == "link alpha-beta")["args"]
    chunk = steps[0]["args"]["bytes"]
    if link["beta_bytes_per_us"] is None:  # a run too noisy to read a bandwidth: no model to
        return  # compare (test_classroom_whatif.py checks what the page says then)
    model = 6 * (link["alpha_us"] + chunk / link["beta_bytes_per_us"])  # 2(W-1) messages of N/W
    start = min(e["ts"] for e in steps if e["args"]["step"] == 1)
    measured = max(e["ts"] + e["dur"] for e in steps) - start
    gap = page.text_content(".gap")
    assert float(page.get_attribute(".gap", "data-ratio")) == pytest.approx(
        measured / model, abs=0.01
    )
    assert "per-call" in gap and "scheduled" in gap and "β changes from run to run" in gap
