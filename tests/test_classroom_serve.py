"""``python -m minidp classroom`` serving its page on 127.0.0.1: the real command, end to end.

    pytest tests/test_classroom_serve.py

The command runs in a subprocess on a small saved trace (``--trace``: it records nothing)
on a free port (``--port 0``). The test reads the address it prints, fetches the page with
urllib and, where Chromium is installed, loads it in the browser with every other origin
blocked; the page served must be the ``index.html`` written, and its lesson link must
open the lesson. Then Ctrl-C (SIGINT): the
command must say "stopped" and exit 0, in bounded time. A port that cannot be opened is a
usage error that names it, never a traceback.
"""

from __future__ import annotations

import importlib.util
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest

from minidp import trace
from minidp.tools.classroom.cli import main as cli_main
from minidp.tools.classroom.shots import browser_path

REPO = Path(__file__).resolve().parents[1]
START_S = 60.0  # the command imports torch before it serves: seconds on a loaded machine
STOP_S = 15.0  # after Ctrl-C: serve_forever polls every 0.5 s


@pytest.fixture
def small_trace(tmp_path) -> Path:
    with trace.recording() as rec:
        with trace.span("forward", lane="compute"):
            trace.instant("grad ready", lane="backward", param="w", index=0)
    return trace.save(tmp_path / "small.json", rec.events)


def _lines(stream, out: queue.Queue) -> None:
    for line in stream:
        out.put(line)
    out.put(None)  # the command closed its output: it ended


def _wait_for(lines: queue.Queue, prefix: str, seen: list[str], seconds: float) -> str:
    while True:
        try:
            line = lines.get(timeout=seconds)
        except queue.Empty:
            raise AssertionError(
                f"expected a line {prefix!r} within {seconds} s, got {seen}"
            ) from None
        assert line is not None, f"expected a line {prefix!r}, the command ended after {seen}"
        seen.append(line)
        if line.startswith(prefix):
            return line


def _in_chromium(request, url: str, page_file: Path) -> None:
    """Load the served page in Chromium, only its own origin allowed; it must run cleanly."""
    from test_classroom_browser import chromium  # the session's one browser

    problems: list[str] = []
    page = chromium(request).new_page()
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}"))

    def same_origin(route):
        if route.request.url.startswith(url):
            route.continue_()
        else:
            problems.append(f"request to another origin: {route.request.url}")
            route.abort()

    try:
        page.route("**/*", same_origin)
        response = page.goto(url)
        assert response is not None and response.status == 200
        assert page.title() == "minidp classroom"
        embedded = page.evaluate("JSON.parse(document.getElementById('trace').textContent)")
        # the lesson link works when served too: the lesson opens inside the page
        name = page.get_attribute("#scene-lesson", "data-lesson")
        assert name and page.get_attribute("#scene-lesson", "href") == f"#lesson:{name}"
        page.click("#scene-lesson")
        assert page.text_content("#lesson-text") == (REPO / "lessons" / name).read_text()
    finally:
        page.close()
    assert problems == []
    html = page_file.read_text()
    start = html.index('id="trace">') + len('id="trace">')
    assert embedded == json.loads(html[start : html.index("</script>", start)])


def test_serves_the_written_page_until_ctrl_c(small_trace, tmp_path, request):
    out = tmp_path / "page"
    stderr = (tmp_path / "stderr.txt").open("w")  # request logs; a file never fills up
    command = [sys.executable, "-m", "minidp", "classroom", "--trace", str(small_trace),
               "--out", str(out), "--port", "0"]  # fmt: skip
    # a user's pipe (| tee) is block-buffered: the address must be flushed, not sit there
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    # Start the server as a terminal starts a foreground command: Ctrl-C reaches it. A test
    # run started in the background (`cmd &` in a script, some CI steps) ignores SIGINT, and
    # an ignored signal stays ignored across exec; one with a handler comes back default
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        proc = subprocess.Popen(
            command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True
        )
    finally:
        signal.signal(signal.SIGINT, previous)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=_lines, args=(proc.stdout, lines), daemon=True).start()
    seen: list[str] = []
    try:
        line = _wait_for(lines, "serving on http://127.0.0.1:", seen, START_S)
        url = line.split()[2]
        assert url.endswith("/") and int(url.rsplit(":", 1)[1].rstrip("/")) > 0, line
        with urllib.request.urlopen(url, timeout=10) as response:
            assert response.status == 200
            assert response.read() == (out / "index.html").read_bytes()
        if browser_path() is not None and importlib.util.find_spec("playwright"):
            _in_chromium(request, url, out / "index.html")
        proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
        _wait_for(lines, "stopped", seen, STOP_S)
        assert proc.wait(timeout=STOP_S) == 0
    finally:
        if proc.poll() is None:  # a failed check: never leave the server behind
            proc.kill()
            proc.wait()
        stderr.close()
    assert "Traceback" not in (tmp_path / "stderr.txt").read_text()


def test_a_port_in_use_is_a_clear_error(small_trace, tmp_path, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(SystemExit) as exit_:
            cli_main(["--trace", str(small_trace), "--out", str(tmp_path), "--port", str(port)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2  # argparse's usage error
    assert f"--port {port}: expected a port free to open on 127.0.0.1, got " in err
    assert "Hint: --port 0 picks a free one" in err and "Traceback" not in err


def test_a_port_out_of_range_fails_before_anything_runs(small_trace, tmp_path, capsys):
    with pytest.raises(SystemExit):
        cli_main(["--trace", str(small_trace), "--out", str(tmp_path / "x"), "--port", "70000"])
    assert "--port: expected 0 (a free one) to 65535, got 70000" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()  # nothing written
