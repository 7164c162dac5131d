"""Run one lesson as a notebook: convert its ``# %%`` cells (jupytext), execute (nbclient).

    python tests/scripts/run_notebook.py lessons/08_ring_all_reduce.py

Each cell runs in a real Jupyter kernel started in ``lessons/`` (so ``import kit`` works and
there is no ``__file__``, as in Jupyter). Everything the cells print is echoed to stdout, so a
caller checks a notebook run the way it checks a script run; the exit code is 1 when a cell
raised (its traceback printed), else 0.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import jupytext
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

TIMEOUT_S = 240  # per cell
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def main(path: str) -> int:
    lesson = Path(path).resolve()
    notebook = jupytext.read(lesson, fmt="py:percent")
    client = NotebookClient(
        notebook,
        timeout=TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(lesson.parent)}},
    )
    failed = None
    try:
        client.execute()
    except CellExecutionError as exc:
        failed = exc
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream":
                sys.stdout.write(output["text"])
            elif output.get("output_type") == "error":  # IPython colours tracebacks: strip it
                sys.stdout.write(ANSI.sub("", "\n".join(output.get("traceback", []))) + "\n")
    if failed is not None:
        print(f"\nnotebook {lesson.name}: a cell raised {failed.ename}: {failed.evalue}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
