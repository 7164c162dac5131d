"""The classroom page without a browser: self-contained, the trace inside, clear errors.

    pytest tests/test_classroom.py

The scenes are recorded once for the module (small sizes, thread-ranks, real gloo).
"""

from __future__ import annotations

import json
import re

import pytest
import torch

from minidp import trace
from minidp.classroom import Options, build_html, load_trace, record, write_page
from minidp.classroom.cli import main as cli_main
from minidp.classroom.page import check_trace


@pytest.fixture(scope="module")
def recorded() -> dict:
    return record(
        Options(world_size=4, numel=8, devices=2, batch=4, width=16), progress=lambda _: None
    )


def embedded(html: str, id_: str):
    m = re.search(rf'<script type="application/json" id="{id_}">(.*?)</script>', html, re.S)
    assert m, f"no <script id={id_}> in the page"
    return json.loads(m.group(1))


def test_page_is_self_contained(recorded):
    html = build_html(recorded)
    # nothing fetched: no external src/href, no <link>, no network API in the scripts
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", html)
    assert "<link" not in html and "fetch(" not in html and "XMLHttpRequest" not in html
    assert html.count("<script") == 3  # trace, scenes, code: all inline (no src=)
    assert "Classroom.start()" in html


def test_embedded_trace_equals_the_recorded_run(recorded):
    page = embedded(build_html(recorded), "trace")
    assert page == json.loads(json.dumps(recorded))
    assert page["otherData"]["scenes"] == ["ring", "traffic", "dp", "ddp", "memory", "fsdp"]
    names = {e["name"] for e in page["traceEvents"]}
    # the library's own events (DDP hooks and buckets, FSDP units) are in it, untouched
    assert {"grad ready", "bucket launch", "all-gather unit 1", "ring step", "memory"} <= names


def test_ring_values_are_the_run_and_match_torch(recorded):
    ev = [e for e in recorded["traceEvents"] if e["name"] in ("ring inputs", "ring result")]
    inputs = {e["pid"]: e["args"]["holds"] for e in ev if e["name"] == "ring inputs"}
    results = [e["args"] for e in ev if e["name"] == "ring result"]
    total = sum(torch.tensor([v for c in inputs[r] for v in c]) for r in inputs)
    assert all(r["result"] == total.tolist() and r["torch_equal"] for r in results)


def test_trace_file_round_trip(recorded, tmp_path, capsys):
    f = tmp_path / "run.json"
    f.write_text(json.dumps(recorded))
    assert cli_main(["--trace", str(f), "--out", str(tmp_path / "page"), "--no-serve"]) == 0
    assert "page written" in capsys.readouterr().out
    html = (tmp_path / "page" / "index.html").read_text()
    assert embedded(html, "trace") == json.loads(f.read_text())


def test_a_library_trace_builds_a_page(tmp_path):
    # what a user saves with minidp.trace under torchrun: library events only
    with trace.recording() as rec:
        with trace.span("forward", lane="compute"):
            trace.instant("grad ready", lane="backward", param="w", index=0)
    path = trace.save(tmp_path / "user.json", rec.events)
    page = write_page(load_trace(path), tmp_path / "out")
    assert embedded(page.read_text(), "trace")["traceEvents"][0]["name"] == "forward"


def test_missing_trace_file_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file"):
        load_trace(tmp_path / "nope.json")


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("not json at all", "not JSON"),
        ('{"events": []}', "traceEvents"),
        ('{"traceEvents": [{"name": "x"}]}', "without 'ph'"),
        ('{"traceEvents": [{"ph": "M", "name": "process_name"}]}', "no events to show"),
    ],
)
def test_not_a_chrome_trace_is_a_clear_error(tmp_path, text, match):
    f = tmp_path / "bad.json"
    f.write_text(text)
    with pytest.raises(ValueError, match=match):
        load_trace(f)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        (Options(world_size=1), "at least 2 for the ring"),
        (Options(world_size=8), "above 6"),
        (Options(numel=2), "--numel must be between"),
        (Options(ddp_world=1), "--ddp-world-size must be at least 2"),
        (Options(only=("rings",)), "unknown scene"),
    ],
)
def test_bad_options_are_clear_errors(options, match):
    with pytest.raises(ValueError, match=match):
        options.check()


def test_cli_reports_bad_options_before_recording(capsys):
    with pytest.raises(SystemExit):
        cli_main(["--world-size", "1", "--no-serve", "--only", "ring"])
    assert "a ring needs two ranks" in capsys.readouterr().err


def test_check_trace_accepts_the_array_format():
    assert check_trace([{"ph": "i", "name": "x", "ts": 0, "pid": 0, "tid": 0}])["traceEvents"]
