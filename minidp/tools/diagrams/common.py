"""What every picture shares: its colours, the off-screen pyplot, and saving a figure.

matplotlib is imported only when a picture is drawn: ``import minidp.tools.diagrams``
works without it, and the command can say what is missing.

Test: ``pytest tests/test_diagrams.py``
"""

from __future__ import annotations

from pathlib import Path

# Colours shared by every picture, so a legend learnt once reads everywhere.
ARRIVED = "#ffd166"  # arrived this step (partial sum)
FINAL = "#8fd694"  # holds the final sum
IDLE = "#eef1f5"
RS_ARROW = "#e07a1f"  # reduce-scatter messages
AG_ARROW = "#3a6ea5"  # all-gather messages


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend: files only, no display needed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: Path, rect=(0, 0, 1, 1)) -> Path:
    """Lay out, write at the committed pictures' resolution, and free the figure."""
    import matplotlib.pyplot as plt

    fig.tight_layout(rect=rect)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
