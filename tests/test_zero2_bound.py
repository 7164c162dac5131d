"""ZeRO-2 at 3 and 4 ranks: the bound lesson 20 states is the one the tests hold it to.

At 2 ranks ZeRO-2 is ``torch.equal`` to torch's ZeRO + DDP; from 3 on it adds the
gradients in the order of gloo's chunks of its own (padded, rank-by-rank) buffer, not of
DDP's bucket, so a parameter may differ in its last bits. Lesson 20 says why and states
the bound; ``tests/test_zero2.py`` runs both at 3 and 4 ranks and holds ZeRO-2 to it
(its reduce-scatter is gloo's own, bit for bit: ``tests/test_reduce_scatter.py``).

Run: ``pytest tests/test_zero2_bound.py``
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from test_zero2 import ULPS_AT_3_4, WORLD_SIZES

LESSON = Path(__file__).resolve().parents[1] / "lessons" / "20_zero2.py"


def test_lesson_20_states_the_bound_test_zero2_holds_at_3_and_4(monkeypatch):
    monkeypatch.syspath_prepend(str(LESSON.parent))  # the lesson imports its kit
    spec = importlib.util.spec_from_file_location("lesson_20", LESSON)
    lesson = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lesson)  # its cells sit under __main__: import is cheap
    assert lesson.BOUND_3_4 == ULPS_AT_3_4
    assert {3, 4} <= set(WORLD_SIZES)
    stated = re.search(r"at most `BOUND_3_4` = (\d(?:\.\d+)?e-\d+)", LESSON.read_text())
    assert stated and float(stated.group(1)) == ULPS_AT_3_4  # the prose says the same number
