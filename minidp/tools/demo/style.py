"""How the demos write to a terminal: ANSI colour or plain text, Unicode or ASCII glyphs.

Colour when stdout is a terminal and ``NO_COLOR`` is unset (``--color auto``), or as asked
(``always|never``); without it the demos mark what colour would show. ASCII arrows and
rules where stdout cannot print Unicode.

Test: ``pytest tests/test_demo_ring.py tests/test_dp_demo_bench.py``
"""

from __future__ import annotations

import os
import sys
from functools import partialmethod


class Style:
    """ANSI styles, or nothing when colour is off; ASCII glyphs when ``unicode`` is off."""

    def __init__(self, color: bool, unicode: bool = True) -> None:
        self.color = color
        self.arrow = "→" if unicode else "->"
        self.to_left = "◀──" if unicode else "<--"
        self.to_right = "──▶" if unicode else "-->"
        self.rule = "─" if unicode else "-"
        self.dot = "·" if unicode else "."
        self.dash = "—" if unicode else "-"

    @classmethod
    def for_stdout(cls, choice: str = "auto") -> Style:
        """``--color auto|always|never`` and stdout's encoding, as the module docstring says."""
        color = {"always": True, "never": False}.get(choice)
        if color is None:
            color = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
        enc = (getattr(sys.stdout, "encoding", None) or "").lower().replace("-", "")
        return cls(color, enc in ("utf8", "utf_8"))

    def sgr(self, code: str, text: str) -> str:
        """``text`` in the ANSI style ``code`` (Select Graphic Rendition), or as it is."""
        return f"\033[{code}m{text}\033[0m" if self.color else text

    bold = partialmethod(sgr, "1")
    dim = partialmethod(sgr, "2")
    head = partialmethod(sgr, "1;36")
    moved = partialmethod(sgr, "1;30;43")  # arrived this step, still a partial sum
    moved_done = partialmethod(sgr, "1;30;42")  # arrived this step and is the final sum
    done = partialmethod(sgr, "1;32")  # holds the final sum

    def verdict(self, ok: bool, t: str) -> str:
        return self.sgr("1;32" if ok else "1;31", t)

    def rank(self, r: int, t: str) -> str:
        return self.sgr(("36", "35", "34", "33", "31", "32")[r % 6], t)
