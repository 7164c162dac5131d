"""``python -m minidp diagrams --out DIR`` draws every picture from real runs.

Run: ``pytest tests/test_diagrams.py`` (two pictures through the command, a few seconds);
``pytest -m slow tests/test_diagrams.py`` draws all seven (about 25 s with ``--quick``).
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


def _draw(out: Path, only: list[str]) -> str:
    argv = [sys.executable, "-m", "minidp", "diagrams", "--out", str(out), "--quick"]
    proc = subprocess.run(
        argv + (["--only", *only] if only else []),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _check_pictures(out: Path, names: list[str], stdout: str) -> None:
    for i, name in enumerate(names, 1):
        path = out / name
        assert path.exists(), f"{name} missing; output:\n{stdout}"
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert path.stat().st_size > 20_000  # a real picture, not an empty canvas
        assert f"[{i}/{len(names)}]" in stdout  # progress, one line per picture


def test_diagrams_command_writes_the_pictures_asked_for(tmp_path):
    stdout = _draw(tmp_path, ["ring", "memory"])
    _check_pictures(tmp_path, ["ring_steps.png", "memory_stages.png"], stdout)
    assert not (tmp_path / "traffic.png").exists()


@pytest.mark.slow
def test_diagrams_command_writes_every_picture(tmp_path):
    _check_pictures(tmp_path, EXPECTED, _draw(tmp_path, []))


def test_committed_pictures_exist():
    """The README and lessons point at these files; ``minidp diagrams`` regenerates them."""
    for name in EXPECTED:
        assert (REPO / "diagrams" / name).exists(), name


def test_only_and_bad_names():
    from minidp.tools import diagrams

    with pytest.raises(SystemExit):
        diagrams.main(["--only", "nonsense"])
