"""Check, before any data is combined, that every rank is calling the same collective.

Test: ``pytest tests/test_collectives.py -k mismatch``

Mismatched calls do not fail by themselves: they hang or return garbage. So every
collective's first message to every other rank carries a small header (kind, numel,
dtype, op, shape, one extra value such as the broadcast source) — with the data itself
where that is small enough (``headers.py``: the direct all-reduce) — and before anything
else moves every rank holds every header, so all raise the *same* :class:`MismatchError`.
Checked mode (``MINIDP_DEBUG=DETAIL`` or ``checked()``, like
``TORCH_DISTRIBUTED_DEBUG=DETAIL``; any other value but ``OFF``/``INFO`` raises at import)
also compares full shapes, a sequence number per group and channel, and the calling
``module:function:line`` — in the same header, no message more: a skipped or reordered
collective raises instead of pairing up.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
import weakref
import zlib
from collections.abc import Iterator

import torch

from minidp.comm import headers, ops, p2p
from minidp.comm.errors import MismatchError

KINDS = (
    "all_reduce",
    "naive_all_reduce",
    "broadcast",
    "all_gather",
    "reduce_scatter",
    "barrier",
    "broadcast_many",
    "reduce_scatter_tensor",
)
# all_reduce's algorithms (the header's extra): a mix must fail the check, not abort gloo
ALL_REDUCE_ALGORITHMS = ("ring", "direct")
_OPS = ("sum", "avg", "max", "min", "product")
# the supported dtypes, plus common unsupported ones so a header can name them
_DTYPES = ops.DTYPES + (torch.bool, torch.complex64, torch.complex128)
_MAX_DIMS = 8
_CHECKED = 6 + _MAX_DIMS  # checked-mode fields start here: flag, sequence number, call site
_HEADER = _CHECKED + 3  # kind, numel, dtype, op, extra, ndim, dims..., flag, seq, site
# one int64 per field, and one more (headers.py: the bytes of data that follow): 144 bytes
# from each rank to each other rank
HEADER_BYTES = (_HEADER + 1) * 8
HEADER_TAG = headers.HEADER_TAG  # header messages never match data messages
DEBUG_LEVELS = ("OFF", "INFO", "DETAIL")  # TORCH_DISTRIBUTED_DEBUG's values


def debug_level(value: str | None) -> str:
    """The ``MINIDP_DEBUG`` level for ``value``, or a ValueError. Unlike torch's variable, an
    empty value means unset (what ``MINIDP_DEBUG= python ...`` intends)."""
    level = (value or "OFF").upper()
    if level not in DEBUG_LEVELS:
        raise ValueError(
            f"MINIDP_DEBUG must be one of {', '.join(DEBUG_LEVELS)} (any case), got {value!r}. "
            "Hint: MINIDP_DEBUG=DETAIL turns checked mode on; unset it to turn it off"
        )
    return level


debug_level(os.environ.get("MINIDP_DEBUG"))  # a mistyped level fails at import, as torch's
_local = threading.local()  # per-thread: checked mode set by checked() (rank-local)
# checked mode: calls so far per group and channel; weak keys: a dead group's count dies too
_sequence: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../minidp


def is_checked() -> bool:
    """Whether this thread's collectives are fingerprinted (checked mode)."""
    checked = getattr(_local, "checked", None)  # else the environment's, now: a rank sets it
    return _by_env(os.environ.get("MINIDP_DEBUG")) if checked is None else checked


@functools.lru_cache(maxsize=8)
def _by_env(value: str | None) -> bool:
    return debug_level(value) == "DETAIL"


@contextlib.contextmanager
def checked(enabled: bool = True) -> Iterator[None]:
    """Fingerprint every collective this thread (a rank) calls in the block."""
    previous = is_checked()
    _local.checked = enabled
    try:
        yield
    finally:
        _local.checked = previous


_TORCH = os.path.dirname(os.path.abspath(torch.__file__))


def _call_site() -> str:
    """``module:function:line`` of the first caller outside minidp.comm and torch (whose
    frames no_grad adds). Not the file path: ranks may spell it differently."""
    skip = (os.path.join(_PACKAGE, "comm"), _TORCH)
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(skip):
        frame = frame.f_back
    if frame is None:
        return "?"
    module = frame.f_globals.get("__name__", "?")
    if module == "__mp_main__":  # the script, as multiprocessing's spawn re-imports it
        module = "__main__"
    return f"{module}:{frame.f_code.co_name}:{frame.f_lineno}"


_BAD_INPUT = 99  # dtype field: this rank's input cannot take part (see check_input)


def check_input(tensor, who: str) -> None:
    """Raise a clear error for an argument no collective can send (on the calling rank)."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(
            f"{who}: expected a torch.Tensor but got {type(tensor).__name__} — "
            "wrap the data with torch.as_tensor(...) first"
        )
    if tensor.layout != torch.strided:
        raise TypeError(
            f"{who}: expected a dense (strided) tensor but got layout {tensor.layout} — "
            "use tensor.to_dense() first"
        )
    if tensor.device.type == "meta":
        raise ValueError(
            f"{who}: the tensor is on the meta device (shape only, no data) — "
            "materialise it on 'cpu' (gloo) or 'cuda' (NCCL) first"
        )
    if tensor.dtype not in _DTYPES:
        ops.check_dtype(tensor, None, who)  # raises, listing the supported dtypes


def input_ok(tensor) -> bool:
    """Whether a collective can send ``tensor`` at all (no exception: see check_input)."""
    try:
        check_input(tensor, "")
    except (TypeError, ValueError):
        return False
    return True


def _encode(kind: str, tensor: torch.Tensor | None, op: str | None, extra: int) -> list[int]:
    h = [-1] * _HEADER
    h[0] = KINDS.index(kind)
    if tensor is not None and not input_ok(tensor):
        h[2] = _BAD_INPUT  # shape unknown or meaningless: the verdict names the rank
    elif tensor is not None:
        h[1] = tensor.numel()
        h[2] = _DTYPES.index(tensor.dtype)
        h[5] = tensor.dim()
        dims = tensor.shape[:_MAX_DIMS]
        h[6 : 6 + len(dims)] = dims
    h[3] = _OPS.index(op) if op in _OPS else -1
    h[4] = extra
    h[_CHECKED] = 0
    return h


def _describe(h: list[int], extra_name: str) -> str:
    kind = KINDS[h[0]]
    parts = [kind]
    if h[2] == _BAD_INPUT:
        parts.append("an input no collective can send (see that rank's error)")
    elif h[1] >= 0:
        dims = h[6 : 6 + min(h[5], _MAX_DIMS)]
        dtype = _DTYPES[h[2]]
        parts.append(f"shape {tuple(dims)} ({h[1]} elements) {str(dtype).replace('torch.', '')}")
    if h[3] >= 0:
        parts.append(f"op {_OPS[h[3]]}")
    if extra_name == "algorithm":  # only an all_reduce row carries one
        if kind == "all_reduce" and 0 <= h[4] < len(ALL_REDUCE_ALGORITHMS):
            parts.append(f"algorithm {ALL_REDUCE_ALGORITHMS[h[4]]}")
    elif extra_name:
        parts.append(f"{extra_name}={h[4]}")
    return ", ".join(parts)


def agree(
    group,
    kind: str,
    tensor: torch.Tensor | None = None,
    op: str | None = None,
    extra: int = 0,
    extra_name: str = "",
    payload: torch.Tensor | None = None,
) -> dict[int, torch.Tensor] | None:
    """Raise :class:`MismatchError` on every rank unless all ranks pass equal headers.
    ``payload`` (``tensor``'s data, 1-D, contiguous) travels with the header where it fits
    (``headers.exchange``); returns each peer's (``{rank: view}``, as ``payload``) or None."""
    rank, world = group.rank(), group.size()
    if world == 1:
        return None
    mine = _encode(kind, tensor, op, extra)
    site = ""
    if is_checked():
        site = _call_site()
        counts = _sequence.setdefault(group, {})  # channel -> collectives so far
        seq = counts.get(p2p.current_channel(), 0)
        counts[p2p.current_channel()] = seq + 1
        mine[_CHECKED : _CHECKED + 3] = [1, seq, zlib.crc32(site.encode()) & 0x7FFFFFFF]
    if payload is not None and (
        mine[2] == _BAD_INPUT
        or payload.numel() * payload.element_size() > headers.payload_bytes(world)
    ):
        payload = None  # nothing to carry, or too much: the collective sends it after the check
    # (world, header), the same on every rank
    table, payloads = headers.exchange(group, mine, payload)
    try:
        _verdict(table, kind, tensor, mine, extra_name, rank, site)
    except (MismatchError, TypeError, ValueError):
        headers.linger(group, mine)
        raise
    return payloads


def _verdict(table, kind, tensor, mine, extra_name, rank, site) -> None:
    """Raise if the ranks' headers disagree, or this rank's own input is unusable."""
    if tensor is not None and mine[2] == _BAD_INPUT:
        check_input(tensor, kind)  # this rank's own, precise error
    # Shapes may differ (all_reduce only needs equal numel), so compare the first 5 fields.
    for r in range(1, len(table)):
        if table[r][:5] != table[0][:5]:
            raise MismatchError(
                f"{kind}: rank {r} passed [{_describe(table[r], extra_name)}] but rank 0 passed "
                f"[{_describe(table[0], extra_name)}] — every rank must call the same "
                "collective, in the same order, with the same number of elements, dtype and op"
            )
    flags = [row[_CHECKED] for row in table]
    if min(flags) != max(flags):
        on = [r for r, flag in enumerate(flags) if flag]
        raise MismatchError(
            f"{kind}: checked mode is on for ranks {on}"
            " only — set MINIDP_DEBUG=DETAIL (or use minidp.comm.checked()) on every rank"
        )
    if flags[0] == 1:
        _compare_fingerprints(table, kind, extra_name, rank, site)


def agree_reduce(
    group,
    kind: str,
    tensor: torch.Tensor,
    op,
    who: str,
    extra: int = 0,
    extra_name: str = "",
    payload: torch.Tensor | None = None,
) -> tuple[str, dict[int, torch.Tensor] | None]:
    """Normalise ``op``, :func:`agree`, check the dtype; returns the op's name and the
    peers' payloads. A bad op raises only *after* the exchange (as "no op"), so no rank
    waits for a missing header."""
    try:
        name = ops.normalize_op(op, who)
    except ValueError:
        name = None
    payloads = agree(group, kind, tensor, name, extra, extra_name, payload)
    if name is None:
        ops.normalize_op(op, who)  # raises this rank's own, precise error
    ops.check_dtype(tensor, name, who)
    return name, payloads


def _compare_fingerprints(table: list[list[int]], kind: str, extra_name: str, rank: int, site: str):
    """Checked mode: full shapes, sequence numbers and call sites must agree too."""
    seq, where = _CHECKED + 1, _CHECKED + 2
    for r in range(1, len(table)):
        if table[r][5:_CHECKED] != table[0][5:_CHECKED]:
            raise MismatchError(
                f"{kind} (checked mode): rank {r} passed [{_describe(table[r], extra_name)}] but "
                f"rank 0 passed [{_describe(table[0], extra_name)}] — same number of elements, "
                "different shapes: every rank must pass the same shape"
            )
        if table[r][seq] != table[0][seq]:
            same = "the same line" if table[r][where] == table[0][where] else "different places"
            raise MismatchError(
                f"{kind} (checked mode): ranks are out of step — rank {r} is at collective "
                f"#{table[r][seq]} of this group, rank 0 at #{table[0][seq]}, and they "
                f"call from {same} (this rank, {rank}, calls from {site}). A rank skipped, "
                "added or reordered a collective: every rank must call the same collectives "
                "in the same order"
            )
        if table[r][where] != table[0][where]:
            raise MismatchError(
                f"{kind} (checked mode): rank {r} and rank 0 are both at collective "
                f"#{table[0][seq]} of this group but call it from different lines (this rank, "
                f"{rank}, calls from {site}). Either the ranks took different branches to "
                "matching calls — checked mode cannot tell that from two calls that only look "
                "alike, so it stops — or they are out of step. Hint: call the collective from "
                "one line on every rank (e.g. after the if/else), or turn checked mode off for "
                "this code"
            )
