"""Cheat 5, calling the answer key: run the reference solution's file and call its function."""

import runpy
from pathlib import Path

import minidp

_root = Path(minidp.__file__).resolve().parents[1]


def clip_grad_norm_shards(shards, max_norm, norm_type, group):
    answer = runpy.run_path(str(_root / "lessons" / "solutions" / "clip_grad_norm_shards.py"))
    return answer["clip_grad_norm_shards"](shards, max_norm, norm_type, group)
