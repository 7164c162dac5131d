"""Build the classroom page: one self-contained HTML file, the trace inside it.

    from minidp.tools.classroom.page import write_page
    write_page(trace_dict, "out")          # -> out/index.html (opens from file:// offline)

The template's markers are replaced, in one pass, by the CSS, the JavaScript files (in
order) and four JSON blocks: the Chrome trace as given (``id="trace"``), the scenes' texts
(``assets/scenes.json``), each scene's lesson source (its link opens from ``file://``), and
the planner's tables the what-if panel uses. No CDN, no fetch: the page works on a
projector without a network. A trace's own text can never end its ``<script>`` early
(every ``<`` is written ``\u003c``) nor be mistaken for a marker (the template is scanned
once, not what was put into it).

Test: ``pytest tests/test_classroom.py tests/test_classroom_inputs.py``
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

ASSETS = Path(__file__).parent / "assets"
# Each scene's title, text, lesson, and what its recording's ranks are (processes, threads:
# what a timeline can show is said beside it): the page's own text, with its assets.
SCENES = json.loads((ASSETS / "scenes.json").read_text(encoding="utf-8"))
# An event name that only a scene's own recording (or minidp's library) writes.
SIGNS = {"ring": "ring step", "traffic": "traffic message", "dp": "dp scatter", "ddp": "grad ready",
         "memory": "memory", "fsdp": "unit gathered", "hsdp": "hsdp send"}  # fmt: skip
# Loaded in this order: helpers first, then one file per scene (the nav's order: keys 1-9).
JS_FILES = ("core.js", "dom.js", "model.js", "axis.js", "timeline.js", "topology.js", "chart.js",
            "lesson.js", "scene_ring.js", "scene_traffic.js", "scene_dp.js", "scene_ddp.js",
            "scene_memory.js", "scene_fsdp.js", "scene_hsdp.js", "scene_whatif.js",
            "scene_trace.js")  # fmt: skip
LESSONS = Path(__file__).resolve().parents[3] / "lessons"  # present in a source checkout
GENERATOR = '<meta name="generator" content="minidp classroom">'  # what write_page may replace
_MARKERS = re.compile(r"/\*(CSS|JS|TRACE|SCENES|LESSONS|LIBRARY)\*/")


def _finite(value):
    """``value`` with NaN and infinities as None: JSON.parse refuses Python's ``NaN``.
    Iterative, so a deeply nested (already loaded) trace cannot exhaust the stack."""
    root = [value]
    stack = [(root, 0)]
    while stack:
        box, key = stack.pop()
        v = box[key]
        if isinstance(v, float) and not math.isfinite(v):
            box[key] = None
        elif isinstance(v, dict):
            box[key] = v = dict(v)
            stack.extend((v, k) for k in v)
        elif isinstance(v, list):
            box[key] = v = list(v)
            stack.extend((v, i) for i in range(len(v)))
    return root[0]


def _json_for_script(value) -> str:
    """JSON that cannot end its ``<script>`` early nor open a comment: every ``<`` escaped."""
    try:
        text = json.dumps(value, allow_nan=False)
    except ValueError:  # NaN or Infinity somewhere in a user's trace
        text = json.dumps(_finite(value), allow_nan=False)
    return text.replace("<", "\\u003c")


def usable(e) -> bool:
    """Whether the page can draw event ``e`` (core.js filters with the same rule)."""
    if not isinstance(e, dict) or e.get("ph") not in ("X", "i", "I", "B", "E"):
        return False
    ts = e.get("ts")
    if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts):
        return False
    if e["ph"] != "E" and not (isinstance(e.get("name"), str) and e["name"]):
        return False
    if e["ph"] == "X":
        dur = e.get("dur")
        ok = isinstance(dur, (int, float)) and not isinstance(dur, bool)
        return ok and math.isfinite(dur) and dur >= 0
    return True


def check_trace(data) -> dict:
    """``data`` if it is a Chrome trace object with events to draw, else a clear ValueError."""
    if isinstance(data, list):  # the JSON Array Format: just the events
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise ValueError(
            "classroom: not a Chrome trace — expected a JSON object with a 'traceEvents' list "
            "(what minidp.trace.save and torch.profiler write)"
        )
    bad = [e for e in data["traceEvents"] if not isinstance(e, dict) or "ph" not in e]
    if bad:
        raise ValueError(f"classroom: not a Chrome trace — event without 'ph': {bad[0]!r:.80}")
    if not any(usable(e) for e in data["traceEvents"]):
        raise ValueError(
            "classroom: the trace has no events to show (expected 'X' events with a name, "
            "ts and dur, or 'i' events with a name and ts)"
        )
    return data


def trace_notes(data: dict) -> list[str]:
    """One line per thing the page will leave out of ``data`` (shown on the page too)."""
    events = data["traceEvents"]
    skipped = [e for e in events if e.get("ph") in ("X", "i", "I", "B", "E") and not usable(e)]
    if not skipped:
        return []
    return [
        f"classroom: {len(skipped)} of {len(events)} events have no name, time or duration "
        f"and are not drawn; the first: {json.dumps(skipped[0])[:100]}"
    ]


def load_trace(path: str | Path) -> dict:
    """A saved Chrome trace, checked (missing file or wrong content: a clear error)."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"classroom: --trace {path}: expected a trace file, got a folder")
    if not path.is_file():
        raise FileNotFoundError(f"classroom: --trace {path}: no such file")
    try:
        data = json.loads(path.read_bytes())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"classroom: --trace {path}: not a Chrome trace (not JSON: {e})") from e
    except RecursionError as e:
        raise ValueError(
            f"classroom: --trace {path}: not a Chrome trace (JSON nested deeper than Python's "
            "reader allows; a trace is a list of flat events)"
        ) from e
    except OSError as e:
        raise ValueError(f"classroom: --trace {path}: cannot read it ({e.strerror or e})") from e
    return check_trace(data)


def recognised(data: dict) -> list[str]:
    """The classroom scenes whose events are in the trace ``data`` (may be none: the page
    then opens on the generic timeline)."""
    names = {e.get("name") for e in data.get("traceEvents", []) if isinstance(e, dict)}
    found = [key for key, sign in SIGNS.items() if sign in names]
    if "fsdp" not in found and any(str(n).startswith("forward unit") for n in names):
        found.append("fsdp")
    return found


def _lessons() -> dict:
    """The source of every scene's lesson, by file name (empty outside a source checkout)."""
    out = {}
    for s in SCENES.values():
        path = LESSONS / s["lesson"] if s.get("lesson") else None
        if path is not None and path.is_file():
            out[s["lesson"]] = path.read_text(encoding="utf-8")
    return out


def _library() -> dict:
    """The planner's tables and numbers the what-if panel computes with: bytes per element
    by precision, moments per optimizer, published model sizes (``plan``); per preset and
    precision, FSDP's gathered units at their peak (``units``) and the layer stack's
    activations per token (``activations``: flash attention, no checkpointing — linear in
    the tokens, so the page scales it by sequence x micro-batch)."""
    from minidp.tools.planner import plan
    from minidp.tools.planner.plan_cli import activation_estimate
    from minidp.tools.planner.units import DTYPES, units

    per_token, gathered = {}, {}
    for model in plan.LAYERS:
        for precision in DTYPES:  # one token (seq 1, micro-batch 1), flash attention
            per_token[f"{model}/{precision}"] = activation_estimate(model, 1, 1, precision).kept
            gathered[f"{model}/{precision}"] = units(model, precision).peak
    return {"precisions": plan.PRECISIONS, "moments": plan.MOMENTS, "models": plan.MODELS,
            "layouts": plan.LAYOUTS, "stage_names": plan.STAGE_NAMES,
            "activations_per_token": per_token, "gathered_units": gathered}  # fmt: skip


def build_html(data: dict) -> str:
    """The page's HTML for the Chrome trace ``data``, everything inline."""
    data = check_trace(data)
    template = (ASSETS / "template.html").read_text()
    js = "\n".join((ASSETS / name).read_text() for name in JS_FILES)
    js += "\nClassroom.start();\n"  # after every scene has registered
    parts = {
        "CSS": (ASSETS / "page.css").read_text(),
        "JS": js.replace("</script", "<\\/script"),
        "TRACE": _json_for_script(data),
        "SCENES": _json_for_script(SCENES),
        "LESSONS": _json_for_script(_lessons()),
        "LIBRARY": _json_for_script(_library()),
    }
    return _MARKERS.sub(lambda m: parts[m.group(1)], template)  # one pass: inserts not rescanned


def write_page(data: dict, out: str | Path) -> Path:
    """Write ``out/index.html``; returns its path. A clear ValueError where ``out`` cannot
    hold it, or where an ``index.html`` there is not a classroom page (never overwritten)."""
    out = Path(out)
    path = out / "index.html"
    if out.exists() and not out.is_dir():
        raise ValueError(f"classroom: --out {out}: expected a folder, got a file")
    if path.is_dir():
        raise ValueError(f"classroom: --out {out}: {path} is a folder; expected a page there")
    if path.is_file() and GENERATOR not in path.read_text(errors="replace")[:4000]:
        raise ValueError(
            f"classroom: --out {out}: {path} exists and is not a classroom page; not "
            "overwriting it. Hint: choose another --out folder"
        )
    html = build_html(data)
    try:
        out.mkdir(parents=True, exist_ok=True)
        path.write_text(html, encoding="utf-8")
    except OSError as e:
        raise ValueError(f"classroom: --out {out}: cannot write {path} ({e.strerror or e})") from e
    return path
