"""The rows and columns of an HSDP mesh as groups, for the learner's function on thread ranks.

Thread ranks share one gloo group each (``world.py``), so the mesh's rows (shard groups)
and columns (replicate groups) are views of it: :class:`MeshGroup` has ``rank``, ``size``,
``send`` and ``recv`` in its own ranks — what minidp's collectives use — and sends through
the learner's group of the call (``learner_group.py``: both ends compared, bytes
counted). Two ranks share at most one row or column, so the groups' messages never meet.

:func:`mesh` and :func:`row_and_column` say which ranks those are (row-major, like
``init_device_mesh((R, S))``).

Test: ``pytest tests/test_exercise_set_a.py -k hsdp``
"""

from __future__ import annotations

from minidp.identity import current_group
from minidp.tools.exercise.inputs import Case
from minidp.tools.exercise.learner_group import LearnerGroup, RefusedCall


def mesh(case: Case) -> tuple[int, int]:
    """(R, S): replicate × shard."""
    return case["replicate"], case["world"] // case["replicate"]


def row_and_column(rank: int, r: int, s: int) -> tuple[list[int], list[int]]:
    """Global ranks of this rank's shard group (its row) and replicate group (its column)."""
    row, col = divmod(rank, s)
    return [row * s + j for j in range(s)], [i * s + col for i in range(r)]


class MeshGroup:
    """A row or column of the mesh as a group: ``rank()``/``size()`` and ``send``/``recv``
    in its own ranks, sent through the learner's group of the current call."""

    def __init__(self, ranks: list[int], me: int, name: str) -> None:
        object.__setattr__(self, "_ranks", list(ranks))
        object.__setattr__(self, "_me", me)
        object.__setattr__(self, "_name", name)

    def rank(self) -> int:
        return self._ranks.index(self._me)

    def size(self) -> int:
        return len(self._ranks)

    def _learner(self) -> LearnerGroup:
        group = current_group()  # guarded(): the learner's group while its function runs
        if not isinstance(group, LearnerGroup):
            raise RefusedCall(
                f"the {self._name} group sends only from the thread your function runs in"
            )
        return group

    def send(self, tensors: list, dst: int, tag: int = 0):
        return self._learner().send(tensors, self._ranks[dst], tag)

    def recv(self, tensors: list, src: int, tag: int = 0):
        return self._learner().recv(tensors, self._ranks[src], tag)

    def __getattr__(self, name: str):
        raise RefusedCall(
            f"the {self._name} group allows only rank, size, send, recv — got a call to "
            f"group.{name}. Hint: use minidp.comm's reduce_scatter and all_reduce with "
            f"group={self._name}_group (built from send/recv)"
        )

    def __setattr__(self, name: str, value) -> None:
        raise RefusedCall(f"the {self._name} group is read-only (set {name})")

    def __repr__(self) -> str:
        return f"MeshGroup({self._name}, ranks={self._ranks})"
