"""Pages from traces the classroom did not record, in a real browser.

    pytest tests/test_classroom_traces.py

A ``torch.profiler`` trace and a user's own DDP trace (minidp's tracer around a plain DDP
script in rank processes) each give a useful page: the scenes whose events they hold, the
generic timeline for the rest, no scene claiming what is not there. Unusual traces (text
that looks like HTML or the page's markers, events without a name, NaN, a name thousands of
characters long) and a large one (150,000 events, 15 MB) open without an error.
"""

from __future__ import annotations

import json

import pytest
import torch
from test_classroom_browser import dom, events, open_page, step_to
from test_classroom_layout import LAYOUT

from minidp import trace
from minidp.tools.classroom.cli import main as cli_main


def page_from(tmp_path, data: dict, capsys, name="t") -> tuple[str, str]:
    """(file URL of the page built by the real command from ``data``, its stdout)."""
    f = tmp_path / f"{name}.json"
    f.write_text(json.dumps(data))
    assert cli_main(["--trace", str(f), "--out", str(tmp_path / name), "--no-serve"]) == 0
    return (tmp_path / name / "index.html").as_uri(), capsys.readouterr().out


def shown_scenes(page) -> list[str]:
    return [
        s
        for (s, c) in dom(page, "nav [data-scene]", "data-scene", "class")
        if "absent" not in (c or "")
    ]


def test_a_torch_profiler_trace_opens_on_its_timeline(tmp_path, capsys, request):
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            model(torch.randn(8, 32)).sum().backward()
    prof.export_chrome_trace(str(tmp_path / "prof.json"))
    data = json.loads((tmp_path / "prof.json").read_text())
    url, out = page_from(tmp_path, data, capsys)
    assert "none of the classroom's scenes are in this trace" in out
    page, problems = open_page(request, url, viewport={"width": 1366, "height": 768})
    assert shown_scenes(page) == ["whatif", "trace"]  # no scene claims what is not there
    assert page.get_attribute("nav .active", "data-scene") == "trace"
    ops = [
        e
        for e in data["traceEvents"]
        if e.get("ph") == "X" and e.get("name", "").startswith("aten::")
    ]
    assert ops and int(page.get_attribute("#scrub", "max")) >= len(ops)
    rows = page.eval_on_selector_all(".tl text.row-label", "els => els.map(e => e.textContent)")
    assert rows and all(" / " in r for r in rows)  # process / thread, from the trace's names
    step_to(page, 3)
    assert page.get_attribute("#caption [data-event]", "data-event")
    # a slice inside another (aten::linear calls aten::addmm) is one track down, as in Perfetto
    ev = [e for e in events(data) if e["ph"] == "X"]  # numbered as the page numbers them
    outer = next(e for e in ev if e["name"] == "aten::linear")
    inner = next(e for e in ev if e["name"] == "aten::addmm" and e["tid"] == outer["tid"]
                 and outer["ts"] <= e["ts"] <= outer["ts"] + outer["dur"])  # fmt: skip
    y = lambda e: float(page.get_attribute(f'.tl rect[data-ev="{e["id"]}"]', "y"))  # noqa: E731
    assert y(inner) > y(outer)
    colours = page.eval_on_selector_all(
        ".tl .legend .sw", "els => els.map(e => e.style.background)"
    )
    assert len(colours) == len(set(colours))  # every legend entry its own colour
    page.keyboard.press("p")
    assert page.evaluate(LAYOUT) == []
    page.close()
    assert problems == []


def _user_ddp(rank: int, world: int) -> list[dict]:
    """A plain DDP training script, traced the way a user would: minidp's tracer around one
    step, its own ``backward`` span; the events come back to be saved."""
    import minidp

    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(3)])
    ddp = minidp.DistributedDataParallel(model, bucket_cap_mb=0.02)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for step in range(2):
        x = torch.randn(32, 64, generator=torch.Generator().manual_seed(rank + 10 * step))
        opt.zero_grad()
        if step:
            with trace.recording() as rec:
                loss = ddp(x).square().mean()
                with trace.span("backward", lane="compute"):
                    loss.backward()
        else:
            ddp(x).square().mean().backward()
        opt.step()
    return rec.events


def test_a_users_ddp_trace_gives_the_ddp_scene(tmp_path, capsys, request, process_world):
    ranks = process_world(2).run(_user_ddp)
    path = trace.save(tmp_path / "user.json", *ranks)
    url, out = page_from(tmp_path, json.loads(path.read_text()), capsys)
    assert "none of the classroom's scenes" not in out
    page, problems = open_page(request, url)
    assert shown_scenes(page) == ["ddp", "whatif", "trace"]
    assert page.get_attribute("nav .active", "data-scene") == "ddp"  # not the traffic scene
    layout = [e for r in ranks for e in r if e["name"] == "ddp buckets" and e["pid"] == 0]
    params = sorted(p for b in layout[0]["args"]["buckets"] for p in b["params"])
    assert sorted(p for (p,) in dom(page, ".chip[data-param]", "data-param")) == params == sorted(
        f"{i}.{w}" for i in range(3) for w in ("weight", "bias"))  # fmt: skip
    last = int(page.get_attribute("#scrub", "max"))
    step_to(page, last)
    assert {s for (s,) in dom(page, ".bucket", "data-state")} == {"reduced"}
    assert {(c,) for (c,) in dom(page, ".chip", "data-ready")} == {("1",)}
    backward = page.eval_on_selector_all(
        ".tl rect[data-ev] title", "els => els.map(e => e.textContent)"
    )
    assert sum(t.startswith("backward — ") for t in backward) == 2  # the user's span, each rank
    assert "loopback" not in page.text_content("#scene-ranks")  # not said of a user's trace
    page.click('nav [data-scene="trace"]')
    # each send's arrow to its receive: the k-th message a -> b with b's k-th receive from a
    msgs = [e for r in ranks for e in r if e["name"] in ("send", "recv")]
    sends = [(e["pid"], e["args"]["peer"]) for e in msgs if e["name"] == "send"]
    recvs = [(e["args"]["peer"], e["pid"]) for e in msgs if e["name"] == "recv"]
    assert sorted(sends) == sorted(recvs)
    assert int(page.get_attribute(".tl", "data-flows")) == len(sends)
    pairs: dict = {}  # the k-th send a -> b is b's k-th receive from a
    for e in events(json.loads(path.read_text())):  # numbered as the page numbers them
        if e["name"] in ("send", "recv"):
            a, b = (e["pid"], e["args"]["peer"])[:: 1 if e["name"] == "send" else -1]
            pairs.setdefault((a, b), {"send": [], "recv": []})[e["name"]].append(e["id"])
    want = {f"{s}>{r}" for p in pairs.values() for s, r in zip(p["send"], p["recv"])}
    drawn = {f for (f,) in dom(page, ".tl line.flow", "data-flow")}
    assert drawn <= want  # each arrow drawn (where not crowded) joins a send and its receive
    # search: every event named "bucket ..." found, Enter steps to the first after this step
    page.fill("#trace-find", "bucket")
    names = sorted(e["name"] for r in ranks for e in r if e.get("ph") in ("X", "i"))
    assert int(page.get_attribute("#trace-found", "data-count")) == sum(
        "bucket" in n for n in names
    )
    page.keyboard.press("Enter")
    assert "bucket" in page.get_attribute("#caption [data-event]", "data-event")
    assert page.eval_on_selector_all(".tl .match", "els => els.length") > 0
    page.close()
    assert problems == []


@pytest.mark.parametrize(
    "odd",
    [
        {"name": "<!-- comment", "args": {"a": "<!--", "b": "</script>"}},
        {"name": "/*SCENES*/ /*TRACE*/"},
        {"name": "nan", "args": {"v": float("nan")}},
        {"name": None},  # no name: left out, and said so
        {"name": "x" * 3000, "args": {"y": "z" * 3000}},  # a long name does not widen the page
    ],
    ids=["html", "markers", "nan", "nameless", "long"],
)
def test_unusual_traces_open_cleanly(tmp_path, capsys, request, odd):
    events = [
        {"ph": "X", "ts": t, "dur": 3, "pid": 1, "tid": 1, "name": f"op {t}"} for t in range(5)
    ]
    odd = {"ph": "X", "ts": 2, "dur": 1, "pid": 1, "tid": 2, **odd}
    if odd["name"] is None:
        del odd["name"]
    url, _ = page_from(tmp_path, {"traceEvents": [*events, odd]}, capsys)
    page, problems = open_page(request, url)
    assert page.get_attribute("nav .active", "data-scene") == "trace"
    for k in range(int(page.get_attribute("#scrub", "max")) + 1):
        step_to(page, k)
        assert page.evaluate("document.documentElement.scrollWidth <= innerWidth"), f"step {k}"
    page.close()
    assert problems == []


def test_a_large_trace_opens(tmp_path, capsys, request):
    n = 150_000  # ~15 MB of JSON: lumped into a pixel's worth of bars where they crowd
    events = [{"ph": "X", "name": f"op {i % 97}", "cat": f"c{i % 5}", "ts": i * 2.0, "dur": 1.5,
               "pid": i % 3, "tid": i % 4, "args": {"i": i}} for i in range(n)]  # fmt: skip
    url, _ = page_from(tmp_path, {"traceEvents": events}, capsys)
    assert (tmp_path / "t" / "index.html").stat().st_size > 12_000_000
    page, problems = open_page(request, url)
    page.wait_for_selector(".tl svg", timeout=120_000)
    assert int(page.get_attribute("#scrub", "max")) == n
    assert dom(page, ".tl rect.lump", "data-count")  # crowded pixels drawn as one
    page.evaluate(f"location.hash = '#trace/{n}'")
    page.wait_for_function(
        f"document.getElementById('step').dataset.step === '{n}'", timeout=60_000
    )
    assert page.get_attribute("#caption [data-event]", "data-event") == f"op {(n - 1) % 97}"
    page.close()
    assert problems == []
