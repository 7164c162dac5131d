"""Cheat 5, calling the answer key: import the reference solution and run it."""

import importlib.util
from pathlib import Path

import minidp

_root = Path(minidp.__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location(
    "answer", _root / "lessons" / "solutions" / "hsdp_reduce.py"
)
_answer = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_answer)


def hsdp_reduce(grad, shard_group, replicate_group):
    return _answer.hsdp_reduce(grad, shard_group, replicate_group)
