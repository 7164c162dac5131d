"""The browser classroom: real runs of minidp, recorded and stepped through in a page.

    python -m minidp classroom --out classroom --no-serve   # then open classroom/index.html
    python -m minidp classroom --trace run.json --no-serve  # any Chrome trace (torch.profiler too)

One command records each scene for real with the recorder (``minidp.tools.recorder``: rank
processes where time is what is taught, threads for DataParallel and for memory) and writes
one self-contained HTML page — JS, CSS, the Chrome trace and the lessons' text inline, no
network — with play/pause, step, scrub, speed, keyboard, a projector mode
(``#ring/0?projector=1``), zoomable timelines, the messages moving, α-β models beside the
measured times, and a what-if panel for real models. ``record.py`` records, ``page.py``
builds the page from ``assets/`` (``scenes.json``: each scene's texts; one ``scene_*.js`` per
scene), ``cli.py`` is the command (``shots.py``: screenshots).

The library never imports this package. Test: ``pytest tests/test_classroom*.py``
"""

from minidp.tools.classroom.cli import main
from minidp.tools.classroom.page import build_html, load_trace, write_page
from minidp.tools.classroom.record import Options, record

__all__ = ["Options", "build_html", "load_trace", "main", "record", "write_page"]
