"""The classroom page without a browser: self-contained, the trace inside, clear errors.

    pytest tests/test_classroom.py

The scenes are recorded once for this module and the browser tests (small sizes,
thread-ranks with real gloo; HSDP in the session's world of 4 rank processes).
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

OPTIONS = Options(world_size=4, numel=8, devices=2, batch=4, width=16)
_ONCE: dict = {}


def recorded_once(process_world) -> dict:
    """Every scene, recorded once per session: this module and tests/test_classroom_browser.py
    read the same run (recording costs seconds). HSDP runs on the session's 4-rank world
    (conftest's ``process_world``: started once, shared with every process test)."""
    if "data" not in _ONCE:
        _ONCE["data"] = record(OPTIONS, progress=lambda _: None, world=process_world(4))
    return _ONCE["data"]


@pytest.fixture(scope="module")
def recorded(process_world) -> dict:
    return recorded_once(process_world)


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
    assert page["otherData"]["scenes"] == [
        "ring", "traffic", "dp", "ddp", "memory", "fsdp", "hsdp"]  # fmt: skip
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
        (Options(hsdp_mesh=(1, 4)), r"--hsdp-mesh RxS with R >= 2 nodes.*got 1x4"),
        (Options(hsdp_mesh=(4, 4)), r"at most 8 ranks.*got 4x4"),
    ],
)
def test_bad_options_are_clear_errors(options, match):
    with pytest.raises(ValueError, match=match):
        options.check()


def test_cli_reports_bad_options_before_recording(capsys):
    with pytest.raises(SystemExit):
        cli_main(["--world-size", "1", "--no-serve", "--only", "ring"])
    assert "a ring needs two ranks" in capsys.readouterr().err


def test_cli_reports_a_bad_mesh_before_recording(capsys):
    with pytest.raises(SystemExit):
        cli_main(["--hsdp-mesh", "2by2", "--no-serve", "--only", "hsdp"])
    assert "expected RxS (nodes x ranks per node, e.g. 2x2), got '2by2'" in capsys.readouterr().err


# ---- HSDP: the run itself says what the scene claims ------------------------------------------


def hsdp(recorded) -> tuple[dict, list[dict], dict]:
    """(mesh event args per rank, sends, unit sizes of rank 0) of the HSDP scene."""
    ev = recorded["traceEvents"]
    mesh = {e["pid"]: e["args"] for e in ev if e["name"] == "hsdp mesh"}
    sends = [e for e in ev if e["name"] == "hsdp send"]
    units = {e["args"]["unit"]: e["args"] for e in ev if e["name"] == "hsdp unit" and e["pid"] == 0}
    return mesh, sends, units


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


def test_check_trace_accepts_the_array_format():
    assert check_trace([{"ph": "i", "name": "x", "ts": 0, "pid": 0, "tid": 0}])["traceEvents"]
