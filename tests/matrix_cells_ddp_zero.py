"""The DDP and ZeRO rows of the training-loop matrix (``training_matrix.py`` explains cells).

Run: ``python tests/training_matrix.py``
"""

from __future__ import annotations

from training_matrix import COLUMNS, Cell

CELLS = {
    row: dict.fromkeys(COLUMNS, Cell("open", note="not yet compared in a combined loop"))
    for row in ("DDP", "ZeRO-1 + DDP", "ZeRO-2")
}
