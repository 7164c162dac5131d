"""The browser classroom: real runs of minidp, recorded and stepped through in a page.

    python -m minidp classroom --out classroom --no-serve   # then open classroom/index.html
    python -m minidp classroom --trace run.json --no-serve  # any Chrome trace (torch.profiler too)

One command records each scene for real (rank processes where time is what is taught:
ring, traffic, DDP, FSDP, HSDP; threads for DataParallel, which is threads, and for the
memory scene, which shows bytes) with ``minidp.trace``, and writes one self-contained HTML
page — JS, CSS, the Chrome trace and the lessons' text inline, no network — with
play/pause, step, scrub, speed, keyboard, a projector mode (``#ring/0?projector=1``),
timelines that zoom and switch between wall clock and logical steps, pictures of the
messages moving, α-β models beside the measured times (and why they differ), and a
what-if panel for real models: sliders, curves, its inputs in the address.

One concept per file:

* ``rec_comm.py`` (ring, server vs ring), ``rec_link.py`` (α and β), ``rec_dp.py``,
  ``rec_ddp.py``, ``rec_memory.py``, ``rec_fsdp.py``, ``rec_hsdp.py`` — record the scenes;
* ``record.py`` — run them, with progress, into one Chrome trace;
* ``scenes.py`` — each scene's title, explanation and lesson;
* ``page.py`` — inline the assets, the trace and the lessons into ``index.html``;
* ``cli.py`` — the command line, serving on 127.0.0.1; ``shots.py`` — screenshots;
* ``assets/`` — the page: ``core.js`` (player, keys, the address), ``dom.js`` (drawing, one
  scale for bytes), ``model.js`` (the lessons' formulas), ``axis.js`` + ``timeline.js``,
  ``topology.js`` (ranks and arrows, laid out once per scene), ``chart.js`` (the what-if's
  curves), ``lesson.js``, one ``scene_*.js`` per scene.

The library never imports this package. Test: ``pytest tests/test_classroom*.py``
"""

from minidp.tools.classroom.cli import main
from minidp.tools.classroom.page import build_html, load_trace, write_page
from minidp.tools.classroom.record import Options, record

__all__ = ["Options", "build_html", "load_trace", "main", "record", "write_page"]
