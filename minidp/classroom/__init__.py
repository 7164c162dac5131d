"""The browser classroom: real runs of minidp, recorded and stepped through in a page.

    python -m minidp classroom --out classroom --no-serve   # then open classroom/index.html

One command records each scene for real (thread-ranks with real gloo groups — rank
processes for HSDP — traced by ``minidp.trace``) and writes one self-contained HTML page
— JS, CSS and the Chrome trace inline, no network — with play/pause, step, scrub, speed,
keyboard and a projector mode.

One concept per file:

* ``rec_comm.py``, ``rec_dp.py``, ``rec_ddp.py``, ``rec_shard.py`` — record the scenes;
  ``rec_hsdp.py`` — one HSDP step, in real rank processes (a 2-D mesh needs them);
* ``record.py`` — run them, with progress, into one Chrome trace;
* ``scenes.py`` — each scene's title, explanation and lesson;
* ``page.py`` — inline the assets and the trace into ``index.html``;
* ``cli.py`` — the command line, serving on 127.0.0.1; ``shots.py`` — screenshots;
* ``assets/`` — the page: ``core.js`` (player), ``timeline.js``, ``scene_*.js``.

The library never imports this package. Test: ``pytest tests/test_classroom.py
tests/test_classroom_browser.py``
"""

from minidp.classroom.cli import main
from minidp.classroom.page import build_html, load_trace, write_page
from minidp.classroom.record import Options, record

__all__ = ["Options", "build_html", "load_trace", "main", "record", "write_page"]
