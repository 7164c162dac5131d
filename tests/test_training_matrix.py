"""The training-loop matrix is complete, every cell's test exists, and the docs show it.

Run: ``pytest tests/test_training_matrix.py``
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from training_matrix import COLUMNS, ROWS, cells, table

ROOT = Path(__file__).resolve().parents[1]


def test_every_cell_is_filled_with_a_kind_and_evidence():
    every = cells()
    assert set(every) == {(r, c) for r in ROWS for c in COLUMNS}
    for (row, col), cell in every.items():
        assert cell.kind in ("equal", "refused", "open"), (row, col, cell)
        assert bool(cell.test) == (cell.kind != "open"), f"{row} / {col}: {cell}"
        assert cell.kind != "open" or cell.note, f"{row} / {col}: an open cell says why"


def test_every_named_test_is_collected(request):
    """A renamed or deleted test would leave a ✓ without evidence: collect them all (those
    this run collected already count; the rest, when this file runs alone, are collected in
    a pytest of their own)."""
    ids = sorted({cell.test for cell in cells().values() if cell.test})
    here = {item.nodeid for item in request.session.items}
    rest = [i for i in ids if i not in here]
    if not rest:
        return
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-p", "no:cacheprovider", *rest],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    collected = set(proc.stdout.splitlines())
    missing = [i for i in rest if i not in collected]
    assert proc.returncode == 0 and missing == [], (
        f"not collected: {missing}\n{proc.stdout[-2000:]}"
    )


def test_the_docs_show_this_table():
    doc = (ROOT / "docs" / "verification.md").read_text()
    assert table() in doc, "docs/verification.md: paste `python tests/training_matrix.py`"
