"""The book's pages, as pages: built from send/recv and the pages before them.

Read from the source (``ast``), not run — the pages' numbers are checked against torch in
``test_textbook_comm.py``, ``test_textbook_dp_ddp.py``, ``test_textbook_shard.py`` and
``test_zero2.py``:

* every page communicates through the book's collectives (``collectives.py``) only: from
  the engine it imports the group helper and torch's ZeRO-1 owner rule, no collective;
  ``collectives.py`` itself stands on the point-to-point layer (``p2p``, ``ops``);
* one padding rule in the book: ``zero.pieces`` / ``zero.rows_per_rank``, used by the FSDP
  page as they are, and no other ceiling division in the book (but the sampler's count of
  indices per rank);
* each page ends with what the engine adds, and no function is longer than a sitting
  (about 40 lines; none over 50).

Run: ``pytest tests/test_textbook_pages.py``
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from minidp.textbook import fsdp, zero

BOOK = Path(zero.__file__).resolve().parent
PAGES = sorted(p for p in BOOK.glob("*.py") if p.name != "__init__.py")
# what a page may take from the engine (module -> names): no collective among them
ENGINE = {
    "minidp.comm": {"group"},
    "minidp.zero.partition": {"partition_parameters"},  # torch's owners (ZeRO-1)
}
SEND_RECV = {"minidp.comm": {"group", "ops", "p2p"}}  # collectives.py: the layer below


def engine_imports(source: str) -> list[tuple[str, str]]:
    """``(module, name)`` of every ``from minidp.X import name`` outside the book."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(a.name, "*") for a in node.names if a.name.startswith("minidp")]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("minidp"):
            if not node.module.startswith("minidp.textbook"):
                found += [(node.module, a.name) for a in node.names]
    return [(m, n) for m, n in found if not m.startswith("minidp.textbook")]


def not_allowed(source: str, allowed: dict[str, set[str]]) -> list[tuple[str, str]]:
    return [(m, n) for m, n in engine_imports(source) if n not in allowed.get(m, set())]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_pages_communicate_through_the_books_collectives_only(page):
    allowed = SEND_RECV if page.name == "collectives.py" else ENGINE
    assert not_allowed(page.read_text(), allowed) == [], f"{page.name} reaches into the engine"


def test_the_import_check_catches_an_engine_collective():
    old_ddp = "from minidp.comm import all_reduce, broadcast\nfrom minidp.comm import group\n"
    assert not_allowed(old_ddp, ENGINE) == [
        ("minidp.comm", "all_reduce"),
        ("minidp.comm", "broadcast"),
    ]
    old_zero = "from minidp.zero.partition import partition_parameters, row_range, rows_per_rank\n"
    assert not_allowed(old_zero, ENGINE) == [
        ("minidp.zero.partition", "row_range"),
        ("minidp.zero.partition", "rows_per_rank"),
    ]


def _ceil_divisions(source: str) -> list[str]:
    """Every ``math.ceil(...)`` and ``-(-a // b)`` in the code (docstrings aside)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        text = ast.unparse(node) if isinstance(node, ast.expr) else ""
        is_ceil = isinstance(node, ast.Call) and text.startswith("math.ceil(")
        negated = (
            isinstance(node, ast.UnaryOp)
            and isinstance(node.op, ast.USub)
            and isinstance(node.operand, ast.BinOp)
            and isinstance(node.operand.op, ast.FloorDiv)
        )
        if is_ceil or negated:
            found.append(text)
    return found


def test_one_padding_rule_in_the_book():
    assert fsdp.pieces is zero.pieces
    rule = {page.name: _ceil_divisions(page.read_text()) for page in PAGES}
    assert rule.pop("zero.py") == ["-(-rows // world)"]  # rows_per_rank, nothing else
    # the sampler pads a list of indices, not a tensor's rows: its own count, len()
    assert rule.pop("sampler.py") == ["-(-n // self.num_replicas)"]
    assert not any(rule.values()), f"a second padding rule: {rule}"


@pytest.mark.parametrize("rows, world", [(5, 2), (13, 4), (2, 4), (0, 3), (8, 8)])
def test_pieces_are_torch_chunk_then_zero_padding(rows, world):
    import torch

    t = torch.arange(rows * 3.0).view(rows, 3) + 1
    parts = zero.pieces(t, world)
    chunks = list(t.chunk(world)) if rows else []
    assert len(parts) == world and len({p.shape for p in parts}) == 1
    for r, part in enumerate(parts):
        real = chunks[r] if r < len(chunks) else t[:0]
        assert torch.equal(part[: len(real)], real) and not part[len(real) :].any()


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_each_page_ends_with_what_the_engine_adds_and_reads_in_a_sitting(page):
    text = page.read_text()
    last_code = max(n.end_lineno for n in ast.parse(text).body)
    tail = text.splitlines()[last_code:]
    comments = [line for line in tail if line.strip()]
    assert comments and comments[0].startswith("# What the engine adds"), page.name
    assert all(line.startswith("#") for line in comments), page.name
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef):
            lines = node.end_lineno - node.lineno + 1
            assert lines <= 50, f"{page.name}: {node.name} is {lines} lines"
