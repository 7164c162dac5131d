"""Build the classroom page: one self-contained HTML file, the trace inside it.

    from minidp.classroom.page import write_page
    write_page(trace_dict, "out")          # -> out/index.html (opens from file:// offline)

The template's markers are replaced by the CSS, the JavaScript files (in order) and two
JSON blocks: ``<script type="application/json" id="trace">`` holds the Chrome trace as
``minidp.trace`` writes it, ``id="scenes"`` the scenes' texts. No CDN, no fetch: the page
works on a projector without a network.

Test: ``pytest tests/test_classroom.py``
"""

from __future__ import annotations

import json
from pathlib import Path

from minidp.classroom.scenes import SCENES

ASSETS = Path(__file__).parent / "assets"
# the scenes' order here is the page's (and keys 1-7 pick them)
JS_FILES = ("core.js", "timeline.js", "scene_comm.js", "scene_step.js", "scene_shard.js",
            "scene_hsdp.js")  # fmt: skip
LESSONS = Path(__file__).resolve().parents[2] / "lessons"  # present in a source checkout


def _json_for_script(value) -> str:
    """JSON that cannot end its ``<script>`` early: ``</`` and ``<!--`` are escaped."""
    return json.dumps(value).replace("</", "<\\/").replace("<!--", "<\\!--")


def check_trace(data) -> dict:
    """``data`` if it is a Chrome trace object with events, else a clear ValueError."""
    if isinstance(data, list):  # the JSON Array Format: just the events
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise ValueError(
            "classroom: not a Chrome trace — expected a JSON object with a 'traceEvents' list "
            "(what minidp.trace.save writes)"
        )
    bad = [e for e in data["traceEvents"] if not isinstance(e, dict) or "ph" not in e]
    if bad:
        raise ValueError(f"classroom: not a Chrome trace — event without 'ph': {bad[0]!r:.80}")
    if not any(e["ph"] in ("X", "i", "I", "B") for e in data["traceEvents"]):
        raise ValueError("classroom: the trace has no events to show (no 'X' or 'i' events)")
    return data


def load_trace(path: str | Path) -> dict:
    """A saved Chrome trace, checked (missing file or wrong content: a clear error)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"classroom: --trace {path}: no such file")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"classroom: --trace {path}: not a Chrome trace (not JSON: {e})") from e
    return check_trace(data)


def _scenes_json() -> dict:
    out = {}
    for key, s in SCENES.items():
        lesson = LESSONS / s["lesson"]
        href = lesson.as_uri() if lesson.is_file() else ""  # file://, never a web address
        out[key] = {**s, "lesson": f"lessons/{s['lesson']}", "href": href}
    return out


def build_html(data: dict) -> str:
    """The page's HTML for the Chrome trace ``data``, everything inline."""
    data = check_trace(data)
    html = (ASSETS / "template.html").read_text()
    js = "\n".join((ASSETS / name).read_text() for name in JS_FILES)
    js += "\nClassroom.start();\n"  # after every scene has registered
    parts = {
        "/*CSS*/": (ASSETS / "page.css").read_text(),
        "/*JS*/": js.replace("</script", "<\\/script"),
        "/*TRACE*/": _json_for_script(data),
        "/*SCENES*/": _json_for_script(_scenes_json()),
    }
    for marker, text in parts.items():
        html = html.replace(marker, text, 1)
    return html


def write_page(data: dict, out: str | Path) -> Path:
    """Write ``out/index.html``; returns its path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "index.html"
    path.write_text(build_html(data), encoding="utf-8")
    return path
