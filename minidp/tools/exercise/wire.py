"""Answers on the wire: how the sandbox hands the learner's results to the judge, as data.

The sandbox (``sandbox.py``) runs the learner's code; what it sends back is plain data,
never objects: JSON frames whose tensors are ``{"$tensor": dtype, "shape": [...], "b64":
their bytes}``. The judge reads them with :func:`decode`, which accepts only that grammar
and rebuilds each tensor from its bytes (``torch.frombuffer``) as a plain ``torch.Tensor``:
no class of the learner's, no pickle, no ``__torch_function__`` ever runs in the judge, so
a tensor subclass whose ``torch.equal`` says True cannot reach the comparison.

:func:`encode` notes what it finds odd (a tensor of a class defined outside torch: the
classic "change what equality means" cheat) in the list it is given; the sandbox sends
those notes as tampering.

Frames: 4-byte big-endian length, then UTF-8 JSON, at most ``MAX_FRAME`` bytes (a
sandbox that sends more, or anything else, sent a malformed answer).

Test: ``pytest tests/test_exercise_guards.py -k wire``
"""

from __future__ import annotations

import base64
import json
import math
import os
import re
import select
import struct
import time
from typing import Any

import torch

MAX_FRAME = 64 * 1024 * 1024
MAX_TEXT = 20_000  # characters of one string (an error's traceback, say)
DTYPES = {
    name: getattr(torch, name)
    for name in (
        "float64",
        "float32",
        "float16",
        "bfloat16",
        "int64",
        "int32",
        "int16",
        "int8",
        "uint8",
        "bool",
    )  # fmt: skip
}
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # terminal escapes in untrusted text


class Malformed(Exception):
    """The sandbox sent something that is not an answer in this grammar."""


class Opaque:
    """Something the learner returned that is neither data nor a tensor: its type's name and
    its repr, so a comparison can say what came back ("expected a tensor, got Foo")."""

    def __init__(self, type_name: str, text: str) -> None:
        self.type_name, self.text = type_name, text

    def __repr__(self) -> str:
        return self.text

    def __eq__(self, other) -> bool:  # never equal to an expected value
        return False

    __hash__ = None


def _tensor_class_note(t: torch.Tensor) -> str | None:
    cls = type(t)
    if cls in (torch.Tensor, torch.nn.Parameter) or cls.__module__.startswith("torch"):
        return None
    return (
        f"returned a {cls.__module__}.{cls.__qualname__} — a torch.Tensor subclass not from "
        "torch: its own equality and __torch_function__ are not used, the check compares "
        "plain values rebuilt from the bytes"
    )


def _bytes_of(t: torch.Tensor) -> bytes:
    flat = t.detach().to("cpu").reshape(-1).contiguous()  # device chosen by the learner: CPU
    as_bytes = flat.view(torch.uint8) if flat.numel() else flat.new_empty(0, dtype=torch.uint8)
    return as_bytes.numpy().tobytes()


def encode(obj: Any, notes: list[str], depth: int = 0) -> Any:
    """``obj`` as JSON-able data (tensors as their bytes); odd findings appended to ``notes``."""
    if depth > 20:
        return {"$object": "too deep", "repr": "a structure nested more than 20 levels"}
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj if not isinstance(obj, str) else obj[:MAX_TEXT]
    if isinstance(obj, float):
        return obj
    if isinstance(obj, torch.Tensor):
        note = _tensor_class_note(obj)
        if note and note not in notes:
            notes.append(note)
        name = str(obj.dtype).replace("torch.", "")
        if name not in DTYPES:
            return {"$object": f"tensor of {name}", "repr": f"a {name} tensor"}
        return {"$tensor": name, "shape": list(obj.shape),
                "b64": base64.b64encode(_bytes_of(obj)).decode("ascii")}  # fmt: skip
    if isinstance(obj, torch.Size):
        return [int(n) for n in obj]
    if isinstance(obj, (list, tuple)):
        return [encode(v, notes, depth + 1) for v in obj]
    if isinstance(obj, dict) and all(isinstance(k, str) for k in obj):
        return {"$dict": {k: encode(v, notes, depth + 1) for k, v in obj.items()}}
    try:
        text = repr(obj)[:200]
    except Exception:
        text = "?"
    return {"$object": type(obj).__name__[:100], "repr": text}


def _text(value: str) -> str:
    return _CONTROL.sub("?", value[:MAX_TEXT])


def decode(obj: Any, depth: int = 0) -> Any:
    """The data :func:`encode` made, with plain tensors; :class:`Malformed` for anything else."""
    if depth > 22:
        raise Malformed("nested too deep")
    if obj is None or isinstance(obj, (bool, int)):
        return obj
    if isinstance(obj, float):
        return obj if not math.isnan(obj) else math.nan
    if isinstance(obj, str):
        return _text(obj)
    if isinstance(obj, list):
        return [decode(v, depth + 1) for v in obj]
    if not isinstance(obj, dict):
        raise Malformed(f"unexpected {type(obj).__name__}")
    if set(obj) == {"$tensor", "shape", "b64"}:
        return _tensor(obj)
    if set(obj) == {"$dict"} and isinstance(obj["$dict"], dict):
        return {_text(str(k)): decode(v, depth + 1) for k, v in obj["$dict"].items()}
    if set(obj) == {"$object", "repr"}:
        return Opaque(_text(str(obj["$object"]))[:100], _text(str(obj["repr"]))[:200])
    raise Malformed(f"unexpected keys {sorted(obj)[:5]}")


def _tensor(obj: dict) -> torch.Tensor:
    dtype = DTYPES.get(obj["$tensor"]) if isinstance(obj["$tensor"], str) else None
    shape = obj["shape"]
    if dtype is None or not isinstance(shape, list) or len(shape) > 8:
        raise Malformed(f"bad tensor header {obj['$tensor']!r} {shape!r}")
    if not all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n for n in shape):
        raise Malformed(f"bad tensor shape {shape!r}")
    try:
        raw = base64.b64decode(obj["b64"], validate=True)
    except (ValueError, TypeError) as exc:
        raise Malformed(f"bad tensor bytes: {exc}") from None
    numel = math.prod(shape)
    itemsize = torch.empty(0, dtype=dtype).element_size()
    if len(raw) != numel * itemsize:
        raise Malformed(f"{len(raw)} bytes for {numel} {obj['$tensor']} elements")
    if not numel:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(raw), dtype=dtype).reshape(shape).clone()


def write_frame(fd: int, obj: Any) -> None:
    data = json.dumps(obj, allow_nan=True).encode()
    if len(data) > MAX_FRAME:
        data = json.dumps({"kind": "oversized", "bytes": len(data)}).encode()
    view = memoryview(struct.pack(">I", len(data)) + data)
    while view:
        view = view[os.write(fd, view) :]


def read_exactly(fd: int, n: int, until: float) -> bytes | None:
    chunks, left = [], n
    while left:
        wait = until - time.monotonic()
        if wait <= 0 or not select.select([fd], [], [], wait)[0]:
            raise TimeoutError
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None  # EOF: the other end is gone
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_frame(fd: int, timeout: float) -> Any:
    """The next frame's JSON (not yet decoded); None at EOF; TimeoutError past ``timeout``;
    :class:`Malformed` for a frame that is not one."""
    until = time.monotonic() + timeout
    head = read_exactly(fd, 4, until)
    if head is None:
        return None
    (size,) = struct.unpack(">I", head)
    if size > MAX_FRAME:
        raise Malformed(f"a frame of {size} bytes (the most is {MAX_FRAME})")
    body = read_exactly(fd, size, max(until, time.monotonic() + 5.0))
    if body is None:
        raise Malformed("the sandbox closed its pipe in the middle of a frame")
    try:
        return json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise Malformed(f"not JSON: {exc}") from None
