"""The verified-torch line every test run ends with, and the matrix it points to (docs/versions.md).

Run: ``pytest tests/test_torch_versions.py``
"""

from __future__ import annotations

from pathlib import Path

from torch_versions import TORCH_VERSIONS, release, verified_line

MATRIX = (Path(__file__).resolve().parents[1] / "docs" / "versions.md").read_text()


def test_a_newer_torch_is_named_as_unverified():
    newest = release(TORCH_VERSIONS[-1])
    newer = f"{newest[0]}.{newest[1] + 1}.0+cu999"
    line = verified_line(newer)
    assert line.startswith(f"torch {newer} is newer than the newest verified release")
    assert TORCH_VERSIONS[-1] in line and "docs/versions.md" in line


def test_a_verified_torch_is_named_with_the_newest():
    for version in TORCH_VERSIONS:
        line = verified_line(version + "+cpu")
        assert line == f"torch {version}+cpu; newest verified release {TORCH_VERSIONS[-1]}"


def test_an_unlisted_older_minor_release_says_so():
    assert "not in the matrix" in verified_line("2.12.0")


def test_release_orders_versions_numerically():
    assert release("2.15.0+cu132") > release("2.9.1") > release("2.4.0")
    assert TORCH_VERSIONS == sorted(TORCH_VERSIONS, key=release)


def test_the_matrix_has_a_row_for_every_verified_release():
    """Each release in the list has its row (from `nox -s summary`); a row with a result names
    the commit it tested (a release just added reads "not run" until its run)."""
    for version in TORCH_VERSIONS:
        rows = [line for line in MATRIX.splitlines() if line.startswith(f"| {version}")]
        assert len(rows) == 1, f"docs/versions.md: no matrix row for torch {version}"
        if "| not run:" in rows[0]:
            continue
        commit = rows[0].rstrip(" |").rsplit("|", 1)[-1].strip()
        assert len(commit) >= 7, f"docs/versions.md: the {version} row names no commit: {rows[0]}"
