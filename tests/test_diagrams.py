"""``python -m minidp diagrams --out DIR`` draws every picture from real runs.

Run: ``pytest tests/test_diagrams.py`` (about 30 s: ``--quick`` runs fewer steps).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

EXPECTED = [
    "ring_steps.png",
    "traffic.png",
    "dp_pipeline.png",
    "ddp_timeline.png",
    "bucket_sweep.png",
    "fsdp_timeline.png",
    "memory_stages.png",
]
REPO = Path(__file__).resolve().parents[1]


def test_diagrams_command_writes_every_picture(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "minidp", "diagrams", "--out", str(tmp_path), "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for i, name in enumerate(EXPECTED, 1):
        path = tmp_path / name
        assert path.exists(), f"{name} missing; output:\n{proc.stdout}"
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert path.stat().st_size > 20_000  # a real picture, not an empty canvas
        assert f"[{i}/{len(EXPECTED)}]" in proc.stdout  # progress, one line per picture


def test_committed_pictures_exist():
    """The README and lessons point at these files; ``minidp diagrams`` regenerates them."""
    for name in EXPECTED:
        assert (REPO / "diagrams" / name).exists(), name


def test_only_and_bad_names():
    from minidp import diagrams

    with pytest.raises(SystemExit):
        diagrams.main(["--only", "nonsense"])
