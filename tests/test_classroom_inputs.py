"""Bad or unusual inputs to ``python -m minidp classroom``: a clear error or a working page.

    pytest tests/test_classroom_inputs.py

Every bad ``--trace``, ``--out`` and ``--save-trace`` is one line on stderr and exit status
2 (never a traceback, never a file overwritten without a word); an unusual but valid trace
(text that looks like HTML or like the page's own markers, events the page cannot draw,
NaN) gives a page whose data blocks are intact JSON. That those pages also run in a
browser is checked in tests/test_classroom_traces.py.
"""

from __future__ import annotations

import json
import re

import pytest

from minidp.tools.classroom import build_html, load_trace, write_page
from minidp.tools.classroom.cli import main as cli_main
from minidp.tools.classroom.page import SCENES, check_trace, trace_notes


def small(extra: list | None = None) -> dict:
    events = [{"name": "forward", "ph": "X", "ts": 0, "dur": 5, "pid": 0, "tid": 1}]
    return {"traceEvents": events + (extra or [])}


def blocks(html: str) -> dict:
    """Every JSON block of the page, parsed (a broken block fails here)."""
    found = re.findall(r'<script type="application/json" id="(\w+)">(.*?)</script>', html, re.S)
    assert [k for k, _ in found] == ["trace", "scenes", "lessons", "library"]
    return {k: json.loads(v) for k, v in found}


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    """The command's exit status, stdout and stderr."""
    try:
        code = cli_main(argv)
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


def one_line_error(argv, capsys, match: str) -> None:
    code, _, err = run(argv, capsys)
    assert code == 2, err
    assert err.startswith("minidp classroom: error: ") and err.count("\n") == 1, err
    assert re.search(match, err), err
    assert "Traceback" not in err


@pytest.fixture
def trace_file(tmp_path):
    def write(data, name="t.json") -> str:
        path = tmp_path / name
        path.write_text(data if isinstance(data, str) else json.dumps(data))
        return str(path)

    return write


# ---- unusual traces: a working page -------------------------------------------------------


@pytest.mark.parametrize(
    "text", ["<!-- x", "</script><script>alert(1)</script>", "/*SCENES*/", "/*TRACE*/ /*JS*/"]
)
def test_text_like_html_or_markers_stays_data(text):
    data = small([{"name": text, "ph": "i", "ts": 1, "pid": 0, "tid": 1, "args": {"a": text}}])
    got = blocks(build_html(data))
    assert got["trace"] == data  # the trace intact, every other block too
    assert got["scenes"] == json.loads(json.dumps(SCENES))


def test_nan_and_infinity_become_null_not_broken_json():
    data = small([{"name": "x", "ph": "X", "ts": 2, "dur": 1, "pid": 0, "tid": 1,
                   "args": {"v": float("nan"), "w": [float("inf")]}}])  # fmt: skip
    assert blocks(build_html(data))["trace"]["traceEvents"][1]["args"] == {"v": None, "w": [None]}


def test_events_the_page_cannot_draw_are_named_not_fatal(trace_file, tmp_path, capsys):
    data = small([{"ph": "X"}, {"ph": "X", "name": "no dur", "ts": 3, "pid": 0, "tid": 1}])
    assert trace_notes(check_trace(data)) == [
        "classroom: 2 of 3 events have no name, time or duration and are not drawn; the "
        'first: {"ph": "X"}'
    ]
    code, out, _ = run(
        ["--trace", trace_file(data), "--out", str(tmp_path / "o"), "--no-serve"], capsys
    )
    assert code == 0 and "2 of 3 events have no name, time or duration" in out
    assert "none of the classroom's scenes are in this trace" in out  # opens on its timeline


def test_a_trace_with_only_undrawable_events_is_an_error():
    with pytest.raises(ValueError, match="no events to show"):
        check_trace({"traceEvents": [{"ph": "X"}, {"ph": "M", "name": "process_name"}]})


# ---- bad --trace: a clear error -----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("not json at all", "not JSON"),
        ("", "not JSON"),
        ('{"events": []}', "traceEvents"),
        ('{"traceEvents": [{"name": "x"}]}', "without 'ph'"),
        ('{"traceEvents": [{"ph": "M", "name": "process_name"}]}', "no events to show"),
        ("[" * 100_000 + "]" * 100_000, "nested deeper"),
    ],
)
def test_not_a_chrome_trace_is_a_clear_error(trace_file, capsys, tmp_path, text, match):
    path = trace_file(text)
    with pytest.raises(ValueError, match=match):
        load_trace(path)
    one_line_error(["--trace", path, "--out", str(tmp_path / "o"), "--no-serve"], capsys, match)
    assert not (tmp_path / "o").exists()


def test_binary_garbage_is_a_clear_error(tmp_path, capsys):
    path = tmp_path / "t.json"
    path.write_bytes(b"\xff\xfe\x00garbage")
    one_line_error(["--trace", str(path), "--no-serve", "--out", str(tmp_path / "o")], capsys,
                   "not a Chrome trace")  # fmt: skip


def test_missing_trace_or_a_folder_is_a_clear_error(tmp_path, capsys):
    one_line_error(["--trace", str(tmp_path / "nope.json"), "--no-serve"], capsys, "no such file")
    one_line_error(
        ["--trace", str(tmp_path), "--no-serve"], capsys, "expected a trace file, got a folder"
    )


# ---- bad --out and --save-trace: a clear error, nothing overwritten -------------------------


def test_out_that_is_a_file_or_under_a_file(trace_file, tmp_path, capsys):
    t = trace_file(small())
    (tmp_path / "file").write_text("mine")
    one_line_error(["--trace", t, "--out", str(tmp_path / "file"), "--no-serve"], capsys,
                   "expected a folder, got a file")  # fmt: skip
    one_line_error(["--trace", t, "--out", str(tmp_path / "file" / "sub"), "--no-serve"], capsys,
                   r"cannot write .*Not a directory")  # fmt: skip
    assert (tmp_path / "file").read_text() == "mine"
    with pytest.raises(ValueError, match="expected a folder, got a file"):
        write_page(small(), tmp_path / "file")


def test_out_whose_index_is_a_folder(trace_file, tmp_path, capsys):
    (tmp_path / "o" / "index.html").mkdir(parents=True)
    one_line_error(["--trace", trace_file(small()), "--out", str(tmp_path / "o"), "--no-serve"],
                   capsys, "is a folder; expected a page there")  # fmt: skip


def test_someone_elses_index_is_never_overwritten(trace_file, tmp_path, capsys):
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text("<html>my homepage</html>")
    one_line_error(["--trace", trace_file(small()), "--out", str(site), "--no-serve"], capsys,
                   "exists and is not a classroom page; not overwriting it")  # fmt: skip
    assert (site / "index.html").read_text() == "<html>my homepage</html>"


def test_a_classroom_page_is_replaced_and_said_so(trace_file, tmp_path, capsys):
    t, out = trace_file(small()), str(tmp_path / "o")
    assert run(["--trace", t, "--out", out, "--no-serve"], capsys)[1].count("page written: ") == 1
    code, stdout, _ = run(["--trace", t, "--out", out, "--no-serve"], capsys)
    assert code == 0 and "page replaced: " in stdout


def test_save_trace_to_a_folder_or_under_a_file(trace_file, tmp_path, capsys):
    t = trace_file(small())
    (tmp_path / "file").write_text("mine")
    one_line_error(["--trace", t, "--save-trace", str(tmp_path), "--out", str(tmp_path / "o"),
                    "--no-serve"], capsys, "expected a file name, got a folder")  # fmt: skip
    one_line_error(["--trace", t, "--save-trace", str(tmp_path / "file" / "t.json"), "--out",
                    str(tmp_path / "o"), "--no-serve"], capsys, "cannot write it")  # fmt: skip
    assert (tmp_path / "file").read_text() == "mine" and not (tmp_path / "o").exists()


def test_save_trace_round_trip(trace_file, tmp_path, capsys):
    t = trace_file(small())
    saved = tmp_path / "deep" / "saved.json"
    code, out, _ = run(["--trace", t, "--save-trace", str(saved), "--out", str(tmp_path / "o"),
                        "--no-serve"], capsys)  # fmt: skip
    assert code == 0 and "trace saved" in out and json.loads(saved.read_text()) == small()
    assert blocks((tmp_path / "o" / "index.html").read_text())["trace"] == small()


def test_bad_options_fail_before_recording(capsys):
    code, _, err = run(["--world-size", "1", "--no-serve", "--only", "ring"], capsys)
    assert code == 2 and "a ring needs two ranks" in err
    code, _, err = run(["--hsdp-mesh", "2by2", "--no-serve", "--only", "hsdp"], capsys)
    assert code == 2 and "expected RxS (nodes x ranks per node, e.g. 2x2), got '2by2'" in err
    code, _, err = run(["--devices", "9", "--batch", "4", "--no-serve", "--only", "dp"], capsys)
    assert code == 2 and "--devices must be between 1 and --batch (4), got 9" in err


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"world_size": 1}, "at least 2 for the ring"),
        ({"world_size": 9}, "above 8"),
        ({"numel": 2}, "--numel must be between"),
        ({"ddp_world": 1}, "--ddp-world-size must be at least 2"),
        ({"ddp_world": 9}, "--ddp-world-size above 8"),
        ({"only": ("rings",)}, "unknown scene"),
        ({"hsdp_mesh": (1, 4)}, r"--hsdp-mesh RxS with R >= 2 nodes.*got 1x4"),
        ({"hsdp_mesh": (4, 4)}, r"at most 8 ranks.*got 4x4"),
    ],
)
def test_bad_options_are_clear_errors(options, match):
    from minidp.tools.classroom import Options

    with pytest.raises(ValueError, match=match):
        Options(**options).check()
