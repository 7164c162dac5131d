"""What the lessons *say*, held to what is true: the words a check cannot reach.

A lesson's checks assert its numbers; these hold its prose and its notebook form:

* every heading (``# ## ...``) sits in a markdown cell, so the notebook renders it;
* the torch releases a lesson names as supported are ``tests/torch_versions.py``'s;
* the book's FSDP page is FSDP2's per-parameter dim-0 cut: no sentence calls it FSDP1's
  flat slice or ``FlatParameter`` (which minidp describes and does not build);
* lessons/README.md's row for lesson 33 says what lesson 33 counts (a checkpointed region
  over two units adds no all-gather).

Run: ``pytest tests/test_lesson_texts.py``
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from torch_versions import TORCH_VERSIONS, release

LESSONS_DIR = Path(__file__).resolve().parents[1] / "lessons"
LESSONS = sorted(LESSONS_DIR.glob("[0-9][0-9]_*.py"))
README = LESSONS_DIR / "README.md"


def headings_in_code_cells(text: str) -> list[str]:
    """``"line N: heading"`` for each markdown heading inside a ``# %%`` code cell."""
    found, markdown = [], False
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith("# %%"):
            markdown = "[markdown]" in line
        elif re.match(r"# #+ ", line) and not markdown:
            found.append(f"line {n}: {line}")
    return found


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name[:2])
def test_headings_sit_in_markdown_cells(path):
    found = headings_in_code_cells(path.read_text())
    assert not found, f"{path.name}: a heading in a code cell is not rendered: {found}"


def test_the_heading_check_catches_a_heading_after_code():
    text = "# %% [markdown]\n# # Lesson\n\n# %%\nx = 1\n#\n# ## 4. Memory\n"
    assert headings_in_code_cells(text) == ["line 7: # ## 4. Memory"]


def test_the_supported_torch_range_is_the_verified_one():
    oldest, newest = (
        ".".join(map(str, release(v)[:2])) for v in TORCH_VERSIONS[:: len(TORCH_VERSIONS) - 1]
    )
    named = {
        (path.name, m.group(0))
        for path in [*LESSONS, README]
        for m in re.finditer(r"\b2\.\d+ to 2\.\d+\b", path.read_text())
    }
    assert named, "the lessons name the supported range (15, 28)"
    wrong = {(name, text) for name, text in named if text != f"{oldest} to {newest}"}
    assert not wrong, f"expected '{oldest} to {newest}' (tests/torch_versions.py), got {wrong}"


def _sentences(text: str) -> list[str]:
    return [" ".join(s.split()) for s in re.split(r"(?<=[.;:])\s", text.replace("#", " "))]


def test_the_book_fsdp_page_is_not_called_fsdp1s_flat_slice():
    for path in (LESSONS_DIR / "21_fsdp.py", README):
        for sentence in _sentences(path.read_text()):
            book = re.search(r"textbook|book's", sentence)
            fsdp1 = re.search(r"FSDP1|FlatParameter|flat slice", sentence)
            assert not (book and fsdp1 and "not built" not in sentence), (path.name, sentence)


def test_lesson_33s_row_says_what_it_counts():
    row = next(line for line in README.read_text().splitlines() if line.startswith("| 33 |"))
    assert "extra all-gather" not in row and "adds no all-gather" in row, row
